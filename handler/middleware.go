package handler

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/adaptq/adaptq/queue"
)

// Recover returns a middleware that turns a panic in the handler into a
// *PanicError carrying the panic value and the stack. The message is then
// not deleted, because an error is returned, and reappears after its
// visibility timeout like any failed message. Panics are not marked
// permanent.
func Recover() Middleware {
	return func(next Func) Func {
		return func(ctx context.Context, m *queue.Message) (err error) {
			defer func() {
				// Since Go 1.21 panic(nil) recovers as a *runtime.PanicNilError,
				// so a nil value here means there was no panic.
				if v := recover(); v != nil {
					err = &PanicError{Value: v, Stack: debug.Stack()}
				}
			}()
			return next(ctx, m)
		}
	}
}

// Timeout returns a middleware that gives the handler's context a deadline
// d from the start of the call. If the deadline passes and the handler
// returns an error, that error is wrapped so that errors.Is(err,
// context.DeadlineExceeded) holds (and errors.Is/As still reach the
// handler's own error). A handler that returns nil after the deadline
// finished its work, so nil is passed through and the message is deleted;
// any result returned before the deadline is passed through untouched. An
// expiry or cancellation of the caller's context is not this middleware's
// timeout and is not wrapped either.
//
// Go cannot stop a goroutine from outside: Timeout only cancels ctx. The
// handler must honour ctx (pass it to every blocking call, check ctx.Done
// in long loops), or it runs on past the deadline while holding the
// message. Keep d below the visibility timeout, or the message may reappear
// for another consumer while this one still works on it.
//
// d ≤ 0 means no timeout: the handler is returned unwrapped.
func Timeout(d time.Duration) Middleware {
	return func(next Func) Func {
		if d <= 0 {
			return next
		}
		// The cause distinguishes this deadline from the caller's; a handler
		// that asks context.Cause(ctx) learns which limit it hit.
		cause := fmt.Errorf("handler: timeout of %s: %w", d, context.DeadlineExceeded)
		return func(ctx context.Context, m *queue.Message) error {
			ctx, cancel := context.WithTimeoutCause(ctx, d, cause)
			defer cancel()
			err := next(ctx, m)
			if err == nil || context.Cause(ctx) != cause {
				return err
			}
			if err == context.DeadlineExceeded {
				return cause
			}
			return fmt.Errorf("%w: %w", cause, err)
		}
	}
}

// Log keys written by Logging. They are stable: dashboards and alerts may
// rely on them.
const (
	LogKeyMsgID        = "msg_id"
	LogKeyDequeueCount = "dequeue_count"
	LogKeyDuration     = "duration"
	LogKeyError        = "error"
	LogKeyStack        = "stack"
)

// Logging returns a middleware that logs every handled message to log: at
// debug level on success, at warn level on failure, and at error level on a
// permanent failure (see IsPermanent), which needs a human. Each entry has
// the fields msg_id, dequeue_count and duration, error on failure, and stack
// when the error is a *PanicError (put Recover inside Logging). The
// body is never logged: it may hold personal data or secrets. Add the queue
// name with log.With(zap.String("queue", name)). A nil log logs nothing.
// A listener logs failures itself, within a rate limit: Logging adds a
// line for every message, failed or not.
func Logging(log *zap.Logger) Middleware {
	if log == nil {
		log = zap.NewNop()
	}
	return func(next Func) Func {
		return func(ctx context.Context, m *queue.Message) error {
			start := time.Now()
			err := next(ctx, m)
			elapsed := time.Since(start)

			lvl, msg := zapcore.DebugLevel, "message handled"
			switch {
			case err == nil:
			case IsPermanent(err):
				lvl, msg = zapcore.ErrorLevel, "message failed permanently"
			default:
				lvl, msg = zapcore.WarnLevel, "message failed"
			}
			if ce := log.Check(lvl, msg); ce != nil {
				fields := []zap.Field{
					zap.String(LogKeyMsgID, m.ID),
					zap.Int(LogKeyDequeueCount, m.DequeueCount),
					zap.Duration(LogKeyDuration, elapsed),
				}
				if err != nil {
					fields = append(fields, zap.NamedError(LogKeyError, err))
				}
				if pe, ok := errors.AsType[*PanicError](err); ok {
					fields = append(fields, zap.ByteString(LogKeyStack, pe.Stack))
				}
				ce.Write(fields...)
			}
			return err
		}
	}
}
