package handler

import "time"

// ExecWaitDelay is Exec with the time it waits, once the command has
// exited, for its output to reach EOF: a test sets it tiny to act as a
// worker whose copying goroutines are late under load.
func ExecWaitDelay(argv []string, o ExecOptions, d time.Duration) (Func, error) {
	return execHandler(argv, o, d)
}
