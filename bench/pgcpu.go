package bench

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// pgServerCPU is the CPU time the machine's PostgreSQL has used: its live
// processes' own time plus, from the postmaster, the time of the children
// it has reaped (autovacuum workers and backends that ended), so that the
// difference of two readings counts every server process that ran in
// between. ok is false where /proc cannot be read or no server runs here.
func pgServerCPU() (time.Duration, bool) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, false
	}
	var total time.Duration
	found := false
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || s[open+1:end] != "postgres" {
			continue
		}
		fs := strings.Fields(s[end+1:])
		if len(fs) < 15 {
			continue
		}
		ticks := func(i int) time.Duration {
			v, _ := strconv.ParseUint(fs[i], 10, 64)
			return time.Duration(v) * time.Second / time.Duration(clockTicks())
		}
		found = true
		total += ticks(11) + ticks(12) // utime, stime
		if ppid, _ := strconv.Atoi(fs[1]); !isPostgres(ppid) {
			total += ticks(13) + ticks(14) // the postmaster: cutime, cstime
		}
	}
	return total, found
}

func isPostgres(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return err == nil && strings.TrimSpace(string(b)) == "postgres"
}

// cpuSpan is the CPU this process and the PostgreSQL server used while f
// ran.
type cpuSpan struct {
	client, server time.Duration
	serverOK       bool
	sys            time.Duration // the client's system share of client
	vcsw, ivcsw    int64         // the client's context switches
}

func measureCPU(f func() error) (cpuSpan, error) {
	c0, _ := cpuTime()
	y0, v0, i0, _ := rusageDetail()
	s0, ok0 := pgServerCPU()
	err := f()
	c1, _ := cpuTime()
	y1, v1, i1, _ := rusageDetail()
	s1, ok1 := pgServerCPU()
	return cpuSpan{client: c1 - c0, server: s1 - s0, serverOK: ok0 && ok1, sys: y1 - y0, vcsw: v1 - v0, ivcsw: i1 - i0}, err
}
