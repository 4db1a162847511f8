//go:build unix && !linux

package handler

import "syscall"

// dieWithParent does nothing here: only Linux can tie a process's life to
// its parent's. A worker killed with SIGKILL leaves its exec: commands to
// finish on their own.
func dieWithParent(*syscall.SysProcAttr) {}
