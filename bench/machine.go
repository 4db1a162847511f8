package bench

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// Machine describes where the figures were measured.
type Machine struct {
	CPU        string
	Cores      int
	GOMAXPROCS int
	Memory     string
	Go         string
	OS         string
	Date       time.Time
	Load       string
	Modules    string
}

// ReadMachine reads the machine's description (Linux /proc where present).
func ReadMachine() Machine {
	m := Machine{
		CPU:        cpuModel(),
		Cores:      runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		Memory:     memTotal(),
		Go:         runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		OS:         runtime.GOOS,
		Date:       time.Now(),
		Load:       loadAverage(),
		Modules:    modules(),
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.OS += " " + strings.TrimSpace(string(b))
	}
	return m
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH + " (model unknown)"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH + " (model unknown)"
}

func memTotal() string {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fs[1], 10, 64)
			if err == nil {
				return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	return ""
}

// loadAverage is /proc/loadavg's three averages, "n/a" elsewhere.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	fs := strings.Fields(string(b))
	if len(fs) < 3 {
		return "n/a"
	}
	return strings.Join(fs[:3], ", ")
}

// modules names the versions of the dependencies the figures depend on.
func modules() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var out []string
	for _, d := range bi.Deps {
		switch d.Path {
		case "modernc.org/sqlite", "github.com/maragudk/goqite",
			"github.com/jackc/pgx/v5", "github.com/riverqueue/river",
			"github.com/hibiken/asynq", "github.com/redis/go-redis/v9":
			v := d.Version
			if d.Replace != nil {
				v = d.Replace.Version
			}
			out = append(out, d.Path+" "+v)
		}
	}
	return strings.Join(out, ", ")
}
