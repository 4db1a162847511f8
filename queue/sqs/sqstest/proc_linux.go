//go:build linux

package sqstest

import "syscall"

// sysProcAttr makes the service the leader of a new process group (so Stop
// ends everything it started) and has the kernel kill it if the test
// binary dies first (a test timeout's panic runs no cleanup).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
