package handler

import (
	"context"
	"errors"
	"net/http"

	"github.com/adaptq/adaptq/queue"
)

// overloadedError marks an error that says the downstream is overloaded.
type overloadedError struct{ err error }

func (e *overloadedError) Error() string    { return e.err.Error() }
func (e *overloadedError) Unwrap() error    { return e.err }
func (e *overloadedError) Overloaded() bool { return true }

// Overloaded marks err as a sign that the service the handler calls is
// overloaded (a pool exhausted, a queue full, "too busy"), not that the
// message is wrong. A listener with adaptive concurrency lowers its
// concurrency on it, and no listener counts such a failure towards the
// message's poisoning. The text of err is unchanged, and errors.Is and
// errors.As still reach it. Overloaded(nil) is nil.
func Overloaded(err error) error {
	if err == nil {
		return nil
	}
	return &overloadedError{err: err}
}

// IsOverloaded reports whether err says the downstream is overloaded: it,
// or an error it wraps, was marked with Overloaded or implements
// interface{ Overloaded() bool } returning true; it is an http: handler's
// 429 Too Many Requests or 503 Service Unavailable (StatusError); it
// carries a server's Retry-After hint (interface{ RetryAfter()
// time.Duration } with a positive wait); or the handler ran out of time
// (context.DeadlineExceeded: handler_timeout). A cancelled context
// (shutdown, a lost lease) is not overload, and neither is a panic
// (PanicError), whatever its value: a crash is the handler's bug, and as
// it is never permanent it is never excused from poisoning either.
func IsOverloaded(err error) bool {
	if err == nil {
		return false
	}
	if _, ok := errors.AsType[*PanicError](err); ok {
		return false
	}
	var o interface{ Overloaded() bool }
	if errors.As(err, &o) && o.Overloaded() {
		return true
	}
	var se *StatusError
	if errors.As(err, &se) && (se.StatusCode == http.StatusTooManyRequests || se.StatusCode == http.StatusServiceUnavailable) {
		return true
	}
	if _, ok := queue.RetryAfter(err); ok {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}
