//go:build unix && !linux

package sqstest

import "syscall"

// sysProcAttr makes the service the leader of a new process group, so Stop
// ends everything it started.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
