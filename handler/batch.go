package handler

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"runtime/debug"
	"time"

	"github.com/adaptq/adaptq/queue"
)

// BatchFunc handles many delivered messages in one call: a bulk INSERT, a
// batched API call, an aggregation. It returns one outcome per message, in
// the order of ms: nil deletes that message; an error sends that message
// alone down the failure path, exactly as a Func's error would (its retry
// delay or a Retry-After hint, Permanent, WorkerFault, the poison queue
// after the maximum dequeue count). A nil or empty slice means every
// message succeeded. A slice of any other length than len(ms) is a bug in
// the handler: every message of the call then fails with
// ErrBatchResults, not permanently.
//
// A BatchFunc must honour ctx, which ends when the call's time is up
// (shutdown grace, a timeout, Abort) or when the lease of any of its
// messages was lost: another consumer may then run that message, so the
// call should stop. It must be idempotent per message, as a Func is. ms
// holds at least one message; the slice and its messages are the
// listener's and must not be kept after the call returns.
type BatchFunc func(ctx context.Context, ms []*queue.Message) []error

// BatchMiddleware wraps a BatchFunc, as Middleware wraps a Func.
type BatchMiddleware func(BatchFunc) BatchFunc

// ChainBatch wraps h in mws, the first outermost, as Chain does. Nil
// middlewares are skipped.
func ChainBatch(h BatchFunc, mws ...BatchMiddleware) BatchFunc {
	for i := len(mws) - 1; i >= 0; i-- {
		if mws[i] != nil {
			h = mws[i](h)
		}
	}
	return h
}

// ErrBatchResults is the failure of every message of a batch call whose
// handler returned a result slice of the wrong length.
var ErrBatchResults = fmt.Errorf("handler: batch handler returned the wrong number of results")

// BatchResults turns a call's return value into exactly one outcome per
// message: nil or empty means all succeeded; a wrong length fails them all
// with ErrBatchResults.
func BatchResults(res []error, n int) []error {
	switch len(res) {
	case n:
		return res
	case 0:
		return make([]error, n)
	}
	err := fmt.Errorf("%w: %d for %d messages", ErrBatchResults, len(res), n)
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

// FailAll returns err as the outcome of each of n messages: a batch
// handler's answer when the whole call failed (a bulk INSERT refused).
func FailAll(n int, err error) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

// RecoverBatch returns a batch middleware that turns a panic in the call
// into a *PanicError for every message of the call: a panic fails the
// whole call, and each message is retried like any failed one.
func RecoverBatch() BatchMiddleware {
	return func(next BatchFunc) BatchFunc {
		return func(ctx context.Context, ms []*queue.Message) (res []error) {
			defer func() {
				if v := recover(); v != nil {
					res = FailAll(len(ms), &PanicError{Value: v, Stack: debug.Stack()})
				}
			}()
			return next(ctx, ms)
		}
	}
}

// TimeoutBatch is Timeout for a batch call: the call's context ends d after
// it starts, and a message's error returned after that deadline is wrapped
// so that errors.Is(err, context.DeadlineExceeded) holds. d ≤ 0 means no
// timeout.
func TimeoutBatch(d time.Duration) BatchMiddleware {
	return func(next BatchFunc) BatchFunc {
		if d <= 0 {
			return next
		}
		cause := fmt.Errorf("handler: timeout of %s: %w", d, context.DeadlineExceeded)
		return func(ctx context.Context, ms []*queue.Message) []error {
			ctx, cancel := context.WithTimeoutCause(ctx, d, cause)
			defer cancel()
			res := BatchResults(next(ctx, ms), len(ms))
			if context.Cause(ctx) != cause {
				return res
			}
			for i, err := range res {
				switch {
				case err == nil:
				case err == context.DeadlineExceeded:
					res[i] = cause
				default:
					res[i] = fmt.Errorf("%w: %w", cause, err)
				}
			}
			return res
		}
	}
}

// JSONBatch adapts fn, a batch handler of decoded values, into a
// BatchFunc: JSON's batch sibling. Each body is decoded into a fresh T as
// JSON does. A body that does not decode fails that message alone,
// permanently (the error as JSON's), and fn gets the others; if none
// decodes, fn is not called. fn returns one outcome per value it got, in
// order (nil or empty: all succeeded), and each is that value's message's.
//
// JSONBatch panics if fn is nil.
func JSONBatch[T any](fn func(ctx context.Context, vs []T) []error) BatchFunc {
	if fn == nil {
		panic("handler: JSONBatch of a nil func")
	}
	return func(ctx context.Context, ms []*queue.Message) []error {
		res := make([]error, len(ms))
		vs := make([]T, 0, len(ms))
		at := make([]int, 0, len(ms)) // at[j]: the message of vs[j]
		for i, m := range ms {
			var v T
			if err := json.Unmarshal(m.Body, &v); err != nil {
				res[i] = Permanent(fmt.Errorf("handler: message %q: decode JSON body into %s: %w",
					m.ID, reflect.TypeFor[T](), err))
				continue
			}
			vs = append(vs, v)
			at = append(at, i)
		}
		if len(vs) == 0 {
			return res
		}
		for j, err := range BatchResults(callJSONBatch(ctx, fn, vs), len(vs)) {
			res[at[j]] = err
		}
		return res
	}
}

// callJSONBatch calls fn, turning a panic into a *PanicError for each of
// its values only: the messages that did not decode keep their permanent
// failure.
func callJSONBatch[T any](ctx context.Context, fn func(context.Context, []T) []error, vs []T) (res []error) {
	defer func() {
		if v := recover(); v != nil {
			res = FailAll(len(vs), &PanicError{Value: v, Stack: debug.Stack()})
		}
	}()
	return fn(ctx, vs)
}
