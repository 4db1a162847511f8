package queue

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"
)

// Errors callers branch on with errors.Is. Drivers wrap them with the
// offending value, so the text always says what was wrong.
var (
	// ErrReceiptMismatch: the pop receipt is not the newest for the message,
	// which timed out and was got again by someone else (the message visibility article: Azure's
	// 400 PopReceiptMismatch). An expected event for a consumer.
	ErrReceiptMismatch = errors.New("queue: pop receipt mismatch")
	// ErrNotFound: no message with this id (deleted, expired, or never
	// there). An expected event for a consumer.
	ErrNotFound = errors.New("queue: message not found")
	// ErrBatchSize: a Get or Peek asked for fewer than 1 or more than 32.
	ErrBatchSize = errors.New("queue: batch size out of range")
	// ErrTooLarge: the body is over the driver's limit.
	ErrTooLarge = errors.New("queue: message too large")
	// ErrInvalidName: the queue name breaks the naming rules (ValidateName).
	ErrInvalidName = errors.New("queue: invalid queue name")
	// ErrInvalidArgument: a duration or other argument is out of range.
	ErrInvalidArgument = errors.New("queue: invalid argument")
	// ErrInvalidURL: Open was given a URL it cannot use (unknown scheme,
	// missing part, unknown parameter).
	ErrInvalidURL = errors.New("queue: invalid queue URL")
	// ErrClosed: the queue or its backend was closed.
	ErrClosed = errors.New("queue: closed")
)

// ThrottleRetryAfter is how long to wait after a throttling error that gives
// no hint of its own (the worker thread governance post: errors 40501, 10928 and 10929 say "back off
// and retry the request after 10 seconds").
const ThrottleRetryAfter = 10 * time.Second

// Throttling error codes of the worker thread governance post (SQL Azure's worker-thread governance).
// Drivers for backends that return them mark the error with Throttled.
const (
	CodeServiceBusy     = 40501
	CodeWorkerLimit     = 10928
	CodeWorkerLimitBusy = 10929
)

// IsThrottlingCode reports whether code is one of the worker thread governance post's throttling codes.
func IsThrottlingCode(code int) bool {
	switch code {
	case CodeServiceBusy, CodeWorkerLimit, CodeWorkerLimitBusy:
		return true
	}
	return false
}

// transientError marks an error that a retry may cure.
type transientError struct {
	err        error
	retryAfter time.Duration
}

func (e *transientError) Error() string   { return e.err.Error() }
func (e *transientError) Unwrap() error   { return e.err }
func (e *transientError) Transient() bool { return true }

// Transient marks err as one a caller should retry (a timeout, a busy
// server, a locked database). retryAfter is the server's hint, or 0 for
// none. Transient(nil, …) is nil.
func Transient(err error, retryAfter time.Duration) error {
	if err == nil {
		return nil
	}
	return &transientError{err: err, retryAfter: retryAfter}
}

// Throttled marks err as a throttling error: transient, retried after
// ThrottleRetryAfter unless the server said otherwise.
func Throttled(err error, retryAfter time.Duration) error {
	if retryAfter <= 0 {
		retryAfter = ThrottleRetryAfter
	}
	return Transient(err, retryAfter)
}

// IsTransient reports whether a retry of the failed call may succeed:
// errors marked with Transient (or implementing Transient() bool), network
// timeouts, refused and reset connections, and unexpected EOFs. A cancelled
// or expired context of the caller is not transient: the caller gave up.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	var t interface{ Transient() bool }
	if errors.As(err, &t) {
		return t.Transient()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	switch {
	case errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.ErrUnexpectedEOF):
		return true
	}
	return false
}

// RetryAfter returns the wait a server asked for before a retry, if err
// carries one.
func RetryAfter(err error) (time.Duration, bool) {
	var t *transientError
	if errors.As(err, &t) && t.retryAfter > 0 {
		return t.retryAfter, true
	}
	var r interface{ RetryAfter() time.Duration }
	if errors.As(err, &r) {
		if d := r.RetryAfter(); d > 0 {
			return d, true
		}
	}
	return 0, false
}
