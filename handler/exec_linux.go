package handler

import "syscall"

// dieWithParent has the kernel send SIGKILL to the command when the worker
// dies, SIGKILL included, which no code of the worker's can catch: a
// handler that outlived its worker would run on while its message, no
// longer renewed, comes back to another worker, and two copies of the
// work would overlap.
//
// The signal reaches the command itself. Processes it started stay (a
// shell script's children); a script should exec its last program
// ("exec python3 worker.py") so that the program is the command. Linux
// sends the signal when the thread that started the command ends; the Go
// runtime ends a thread only when a goroutine locked to it returns
// without unlocking it, which Exec's goroutines never are.
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
