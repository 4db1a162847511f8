//go:build unix

package bench

import (
	"runtime"
	"syscall"
	"time"
)

// maxRSS is getrusage's peak resident set of this process, in KiB.
func maxRSS() (int64, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	kb := int64(ru.Maxrss)
	if runtime.GOOS == "darwin" {
		kb /= 1024 // bytes there
	}
	return kb, true
}

// cpuTime is the CPU time (user + system) this process has used.
func cpuTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// rusageDetail is this process's system CPU time and its voluntary and
// involuntary context switches so far (the kernel's share of a drain:
// syscalls, and goroutine hand-offs that park a thread).
func rusageDetail() (sys time.Duration, vol, invol int64, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, 0, false
	}
	return time.Duration(ru.Stime.Nano()), int64(ru.Nvcsw), int64(ru.Nivcsw), true
}
