package handler

import (
	"errors"
	"fmt"
	"syscall"
)

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() error   { return e.err }
func (e *permanentError) Permanent() bool { return true }

// Permanent marks err as one that retrying cannot fix: a body that does not
// decode, a reference to something that will never exist. The listener does
// not retry such a failure in a tight loop and moves the message to the
// poison queue. The text of err is unchanged, and errors.Is and errors.As
// still reach err and everything it wraps. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked with
// Permanent or implements interface{ Permanent() bool } returning true. The
// first error in the chain that has a Permanent method decides.
func IsPermanent(err error) bool {
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}

// PanicError is what Recover returns for a handler that panicked.
//
// A panic is not a permanent failure: it may come from a transient state (a
// nil map that a concurrent init had not yet filled), so the message is
// retried like any failed one. PanicError says so explicitly with a
// Permanent method that returns false, which also holds if the panic value
// is an error marked permanent.
type PanicError struct {
	// Value is what the handler passed to panic.
	Value any
	// Stack is the panicking goroutine's stack trace (runtime/debug.Stack).
	Stack []byte
}

// Error returns "handler: panic: " followed by the panic value.
func (e *PanicError) Error() string { return fmt.Sprintf("handler: panic: %v", e.Value) }

// Unwrap returns the panic value if it is an error, so errors.Is and
// errors.As reach it, and nil otherwise.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// Permanent reports false: a panic is retried like any other failure.
func (e *PanicError) Permanent() bool { return false }

// workerFaultError marks an error of the worker's own making.
type workerFaultError struct{ err error }

func (e *workerFaultError) Error() string     { return e.err.Error() }
func (e *workerFaultError) Unwrap() error     { return e.err }
func (e *workerFaultError) WorkerFault() bool { return true }

// WorkerFault marks err as the worker's fault, not the message's: the
// worker ran out of a resource (file descriptors, memory, processes) and
// could not even try the message. The listener does not count such a
// failure towards poisoning: it hands the message back at once, for
// another worker or a later try, and pauses its own gets for a while. The
// text of err is unchanged, and errors.Is and errors.As still reach it.
// WorkerFault(nil) is nil.
func WorkerFault(err error) error {
	if err == nil {
		return nil
	}
	return &workerFaultError{err: err}
}

// exhausted are the errors of a process that ran out of a resource:
// file descriptors, its own (EMFILE) or the system's (ENFILE), and memory.
var exhausted = []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM}

// IsWorkerFault reports whether err, or an error it wraps, was marked with
// WorkerFault or implements interface{ WorkerFault() bool } returning true,
// or is an error of a process out of resources: "too many open files"
// (EMFILE, ENFILE) or "cannot allocate memory" (ENOMEM). Exec also marks
// a command that could not start because the system would not create a
// process (EAGAIN).
func IsWorkerFault(err error) bool {
	if err == nil {
		return false
	}
	var w interface{ WorkerFault() bool }
	if errors.As(err, &w) {
		return w.WorkerFault()
	}
	for _, e := range exhausted {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
