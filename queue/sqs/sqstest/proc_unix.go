//go:build unix

package sqstest

import (
	"os/exec"
	"syscall"
)

// killGroup signals the process group that cmd leads.
func killGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
}
