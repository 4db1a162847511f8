package queue

import (
	"context"
	"errors"
	"time"

	"github.com/adaptq/adaptq/queue/driver"
)

// Errors callers branch on with errors.Is. They are package driver's
// values, so a driver's errors match them. The portable Queue wraps every
// error with the driver, operation and queue, and the offending value.
var (
	// ErrReceiptMismatch: the pop receipt is not the newest for the message,
	// which timed out and was got again by someone else (the message visibility article; Azure's
	// 400 PopReceiptMismatch). An expected event for a consumer.
	ErrReceiptMismatch = driver.ErrReceiptMismatch
	// ErrNotFound: no message with this id (deleted, expired, or never
	// there). An expected event for a consumer.
	ErrNotFound = driver.ErrNotFound
	// ErrBatchSize: a Get or Peek asked for fewer than 1 or more than the
	// driver's maximum (Features().MaxBatch, at most 32).
	ErrBatchSize = driver.ErrBatchSize
	// ErrTooLarge: the body is over the driver's limit.
	ErrTooLarge = driver.ErrTooLarge
	// ErrInvalidName: the queue name breaks the naming rules (ValidateName).
	ErrInvalidName = driver.ErrInvalidName
	// ErrInvalidArgument: a duration or other argument is out of range.
	ErrInvalidArgument = driver.ErrInvalidArgument
	// ErrInvalidURL: Open was given a URL it cannot use (unknown scheme,
	// missing part, unknown parameter).
	ErrInvalidURL = driver.ErrInvalidURL
	// ErrClosed: the queue or its backend was closed.
	ErrClosed = driver.ErrClosed
	// ErrUnsupported: the backend does not have the operation (see
	// Features).
	ErrUnsupported = driver.ErrUnsupported
	// ErrInvalidMetadata: a Put's metadata breaks the backend's limits
	// (Features().Metadata) or the key rule (driver.ValidMetadataKey); the
	// error is a *MetadataError naming the key and the limit, and nothing
	// was written.
	ErrInvalidMetadata = driver.ErrInvalidMetadata
)

// MetadataError is the typed error of refused metadata (errors.As): the
// key and the limit it broke. It also matches ErrTooLarge for a size.
type MetadataError = driver.MetadataError

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

// Transient marks err as one a caller should retry (a timeout, a busy
// server, a locked database). retryAfter is the server's hint, or 0 for
// none. Transient(nil, …) is nil.
func Transient(err error, retryAfter time.Duration) error {
	return driver.Transient(err, retryAfter)
}

// Throttled marks err as a throttling error: transient, retried after
// ThrottleRetryAfter unless the server said otherwise.
func Throttled(err error, retryAfter time.Duration) error {
	if retryAfter <= 0 {
		retryAfter = ThrottleRetryAfter
	}
	return driver.Transient(err, retryAfter)
}

// IsTransient reports whether a retry of the failed call may succeed. An
// error of a Queue says what its driver's Classify said; any other error is
// classified as every backend would (driver.DefaultClassify): errors marked
// with Transient, network timeouts, refused and reset connections, and
// unexpected EOFs. A cancelled or expired context of the caller is not
// transient: the caller gave up.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	t, _ := driver.DefaultClassify(err)
	return t
}

// RetryAfter returns the wait a server asked for before a retry, if err
// carries one.
func RetryAfter(err error) (time.Duration, bool) {
	if err == nil {
		return 0, false
	}
	_, d := driver.DefaultClassify(err)
	return d, d > 0
}
