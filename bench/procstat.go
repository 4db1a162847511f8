package bench

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// machineCPU is a reading of the whole machine's CPU time (Linux
// /proc/stat), to tell how busy other processes kept the cores during a
// measurement.
type machineCPU struct {
	busy, total float64
	ok          bool
}

func readMachineCPU() machineCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fs := strings.Fields(line)
	if len(fs) < 5 || fs[0] != "cpu" {
		return machineCPU{}
	}
	var m machineCPU
	for i, f := range fs[1:] {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return machineCPU{}
		}
		if i >= 8 { // guest time is already counted in user
			break
		}
		m.total += v
		if i != 3 && i != 4 { // idle, iowait
			m.busy += v
		}
	}
	m.ok = true
	return m
}

// coresBusy is how many cores the whole machine kept busy between a and
// b, NaN where it cannot be read.
func coresBusy(a, b machineCPU, ncpu int) float64 {
	if !a.ok || !b.ok || b.total <= a.total {
		return math.NaN()
	}
	return (b.busy - a.busy) / (b.total - a.total) * float64(ncpu)
}

// usage is what a timed span cost: wall time, this process's CPU time,
// and the whole machine's CPU readings.
type usage struct {
	wall, cpu   time.Duration
	busy, total float64 // machine CPU ticks; total 0: unknown
}

// span measures f.
func span(f func() error) (usage, error) {
	c0, _ := cpuTime()
	m0 := readMachineCPU()
	t0 := time.Now()
	err := f()
	u := usage{wall: time.Since(t0)}
	c1, _ := cpuTime()
	m1 := readMachineCPU()
	u.cpu = c1 - c0
	if m0.ok && m1.ok {
		u.busy, u.total = m1.busy-m0.busy, m1.total-m0.total
	}
	return u, err
}

func (u *usage) add(v usage) {
	u.wall += v.wall
	u.cpu += v.cpu
	u.busy += v.busy
	u.total += v.total
}

// cores is the cores this process kept busy.
func (u usage) cores() float64 { return u.cpu.Seconds() / u.wall.Seconds() }

// machineCores is the cores the whole machine kept busy, NaN if unknown.
func (u usage) machineCores() float64 {
	if u.total <= 0 {
		return math.NaN()
	}
	// The readings differ in resolution (/proc/stat counts 10 ms ticks):
	// the machine is never less busy than this process.
	return math.Max(u.busy/u.total*float64(runtime.NumCPU()), u.cores())
}

// describe says how busy this process and the machine were, and the CPU
// per message.
func (u usage) describe(msgs int) string {
	s := fmt.Sprintf("%s of CPU per message; this process kept %.2f cores busy", usString(u.cpu/time.Duration(max(msgs, 1))), u.cores())
	if m := u.machineCores(); !math.IsNaN(m) {
		s += fmt.Sprintf(", the machine %.2f of %d", m, runtime.NumCPU())
	}
	return s
}

// procCPU is the CPU time (user + system) a process has used, from Linux
// /proc/<pid>/stat; with tid > 0, that of the process's thread tid alone
// (/proc/<pid>/task/<tid>/stat). ok is false where /proc cannot be read.
func procCPU(pid, tid int) (time.Duration, bool) {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	if tid > 0 {
		path = fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// the fields after its closing parenthesis start at field 3 (state).
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	fs := strings.Fields(string(b[i+1:]))
	if len(fs) < 13 {
		return 0, false
	}
	// utime and stime are fields 14 and 15, in clock ticks.
	ut, err1 := strconv.ParseUint(fs[11], 10, 64)
	st, err2 := strconv.ParseUint(fs[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(ut+st) * time.Second / time.Duration(clockTicks()), true
}

// clockTicks is the kernel's USER_HZ, the unit of /proc's CPU times: the
// AT_CLKTCK entry of this process's auxiliary vector, 100 (what Linux uses
// on every common architecture) if it cannot be read.
func clockTicks() int64 {
	clkTckOnce.Do(func() {
		clkTck = 100
		b, err := os.ReadFile("/proc/self/auxv")
		if err != nil {
			return
		}
		w := int(unsafe.Sizeof(uintptr(0)))
		word := func(p []byte) uint64 {
			if w == 8 {
				return binary.NativeEndian.Uint64(p)
			}
			return uint64(binary.NativeEndian.Uint32(p))
		}
		const atClkTck = 17
		for i := 0; i+2*w <= len(b); i += 2 * w {
			if word(b[i:]) == atClkTck {
				if v := word(b[i+w:]); v > 0 {
					clkTck = int64(v)
				}
				return
			}
		}
	})
	return clkTck
}

var (
	clkTckOnce sync.Once
	clkTck     int64
)
