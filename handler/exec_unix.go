//go:build unix

package handler

import (
	"os/exec"
	"syscall"
)

// killProcessGroupOnCancel starts cmd as the leader of a new process group
// and makes the end of its context kill the whole group, so that the
// children of a shell script die with it. Where the system can (Linux),
// the command is also killed if the worker dies without cancelling it
// (see dieWithParent).
func killProcessGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd.SysProcAttr)
	cmd.Cancel = func() error {
		// Once Wait has reaped the leader its pid, and so the group id, may
		// be reused: do not signal a group that is known to be gone. (A
		// reap between this check and the kill cannot be excluded, but the
		// kernel does not hand out a freed pid again within microseconds.)
		if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
			return err // os.ErrProcessDone: nothing to cancel
		}
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err == nil {
			return nil
		}
		// The group is gone (ESRCH) or, on some BSDs, holds only zombies
		// (EPERM): make sure of the leader itself.
		return cmd.Process.Kill()
	}
}
