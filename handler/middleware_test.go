package handler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
)

type custom struct{ code int }

func TestRecover(t *testing.T) {
	t.Parallel()
	sentinel := errors.New("sentinel")
	tests := []struct {
		name     string
		value    any
		wantText string
	}{
		{"string", "boom", "boom"},
		{"error", fmt.Errorf("wrapped: %w", sentinel), "wrapped: sentinel"},
		{"permanent error", handler.Permanent(sentinel), "sentinel"},
		{"custom value", custom{code: 7}, "{7}"},
		{"int", 42, "42"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := handler.Chain(func(context.Context, *queue.Message) error {
				panic(tt.value)
			}, handler.Recover())

			err := h(context.Background(), &queue.Message{ID: "m"})

			var pe *handler.PanicError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %#v, want a *PanicError", err)
			}
			if pe.Value != tt.value {
				t.Errorf("Value = %#v, want %#v", pe.Value, tt.value)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("Error() = %q, want it to contain %q", err, tt.wantText)
			}
			if !strings.Contains(string(pe.Stack), "TestRecover") {
				t.Errorf("Stack does not show the panicking func:\n%s", pe.Stack)
			}
			if handler.IsPermanent(err) {
				t.Error("a panic is marked permanent")
			}
			if _, isErr := tt.value.(error); isErr && !errors.Is(err, sentinel) {
				t.Error("errors.Is does not reach the panicked error")
			}
		})
	}
}

func TestRecoverPanicNil(t *testing.T) {
	t.Parallel()
	h := handler.Chain(func(context.Context, *queue.Message) error { panic(nil) }, handler.Recover())
	var pe *handler.PanicError
	if err := h(context.Background(), &queue.Message{ID: "m"}); !errors.As(err, &pe) {
		t.Fatalf("err = %v, want a *PanicError", err)
	}
}

func TestRecoverPassesResultThrough(t *testing.T) {
	t.Parallel()
	want := errors.New("failed")
	for _, ret := range []error{nil, want, handler.Permanent(want)} {
		h := handler.Chain(func(context.Context, *queue.Message) error { return ret }, handler.Recover())
		if err := h(context.Background(), &queue.Message{ID: "m"}); err != ret {
			t.Errorf("err = %v, want %v untouched", err, ret)
		}
	}
}

// waitDone is a handler that honours ctx: it blocks until ctx ends and then
// returns ret(ctx).
func waitDone(ret func(ctx context.Context) error) handler.Func {
	return func(ctx context.Context, _ *queue.Message) error {
		<-ctx.Done()
		return ret(ctx)
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	failed := errors.New("failed")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Unix(0, 0))
	t.Cleanup(cancel2)

	tests := []struct {
		name      string
		d         time.Duration
		parent    context.Context
		h         handler.Func
		exact     bool  // the handler's own result must come back untouched
		want      error // the handler's result, or what errors.Is must reach
		deadline  bool  // errors.Is(err, context.DeadlineExceeded) must hold
		permanent bool
	}{
		{name: "fast success", d: time.Hour, exact: true, want: nil,
			h: func(context.Context, *queue.Message) error { return nil }},
		{name: "fast failure untouched", d: time.Hour, exact: true, want: failed,
			h: func(context.Context, *queue.Message) error { return failed }},
		{name: "fast permanent untouched", d: time.Hour, exact: true, want: handler.Permanent(failed), permanent: true},
		{name: "returns ctx.Err", d: time.Millisecond, deadline: true,
			h: waitDone(func(ctx context.Context) error { return ctx.Err() })},
		{name: "returns own error", d: time.Millisecond, deadline: true, want: failed,
			h: waitDone(func(context.Context) error { return failed })},
		{name: "returns wrapped ctx error", d: time.Millisecond, deadline: true,
			h: waitDone(func(ctx context.Context) error { return fmt.Errorf("query: %w", ctx.Err()) })},
		{name: "permanent error stays permanent", d: time.Millisecond, deadline: true, want: failed, permanent: true,
			h: waitDone(func(context.Context) error { return handler.Permanent(failed) })},
		{name: "success after deadline stays success", d: time.Millisecond, exact: true, want: nil,
			h: waitDone(func(context.Context) error { return nil })},
		{name: "caller cancelled: not wrapped", d: time.Hour, parent: cancelled, exact: true, want: context.Canceled,
			h: waitDone(func(ctx context.Context) error { return ctx.Err() })},
		{name: "caller deadline: not wrapped", d: time.Hour, parent: expired, exact: true, want: context.DeadlineExceeded,
			h: waitDone(func(ctx context.Context) error { return ctx.Err() })},
		{name: "zero: no deadline", d: 0, exact: true, want: failed,
			h: func(ctx context.Context, _ *queue.Message) error {
				if _, ok := ctx.Deadline(); ok {
					return errors.New("ctx has a deadline")
				}
				return failed
			}},
		{name: "negative: no deadline", d: -time.Second, exact: true, want: failed,
			h: func(ctx context.Context, _ *queue.Message) error {
				if _, ok := ctx.Deadline(); ok {
					return errors.New("ctx has a deadline")
				}
				return failed
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := tt.h
			if h == nil {
				h = func(context.Context, *queue.Message) error { return tt.want }
			}
			if tt.d > 0 {
				inner := h
				h = func(ctx context.Context, m *queue.Message) error {
					if _, ok := ctx.Deadline(); !ok {
						return errors.New("handler ctx has no deadline")
					}
					return inner(ctx, m)
				}
			}
			parent := tt.parent
			if parent == nil {
				parent = context.Background()
			}

			err := handler.Chain(h, handler.Timeout(tt.d))(parent, &queue.Message{ID: "m"})

			if tt.exact && err != tt.want {
				t.Errorf("err = %v, want %v untouched", err, tt.want)
			}
			if !tt.exact && tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.want)
			}
			if tt.deadline && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("errors.Is(%v, context.DeadlineExceeded) = false", err)
			}
			if handler.IsPermanent(err) != tt.permanent {
				t.Errorf("IsPermanent(%v) = %v, want %v", err, !tt.permanent, tt.permanent)
			}
		})
	}
}

func TestTimeoutCause(t *testing.T) {
	t.Parallel()
	var cause error
	h := handler.Chain(waitDone(func(ctx context.Context) error {
		cause = context.Cause(ctx)
		return ctx.Err()
	}), handler.Timeout(time.Millisecond))
	err := h(context.Background(), &queue.Message{ID: "m"})
	if !errors.Is(cause, context.DeadlineExceeded) || !strings.Contains(cause.Error(), "timeout of 1ms") {
		t.Errorf("context.Cause = %v, want the handler timeout", cause)
	}
	if err.Error() != cause.Error() {
		t.Errorf("err = %q, want %q", err, cause)
	}
}

func TestLogging(t *testing.T) {
	t.Parallel()
	failed := errors.New("db down")
	tests := []struct {
		name      string
		ret       error
		wantLevel zapcore.Level
	}{
		{"success", nil, zapcore.DebugLevel},
		{"failure", failed, zapcore.WarnLevel},
		{"wrapped failure", fmt.Errorf("save: %w", failed), zapcore.WarnLevel},
		{"permanent failure", fmt.Errorf("save: %w", handler.Permanent(failed)), zapcore.ErrorLevel},
		{"panic", &handler.PanicError{Value: "boom", Stack: []byte("goroutine 1")}, zapcore.WarnLevel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			core, logs := observer.New(zapcore.DebugLevel)
			const body = "card=4111-1111-1111-1111"
			m := &queue.Message{ID: "msg-7", DequeueCount: 3, Body: []byte(body)}

			h := handler.Chain(func(context.Context, *queue.Message) error { return tt.ret },
				handler.Logging(zap.New(core)))
			if err := h(context.Background(), m); err != tt.ret {
				t.Errorf("err = %v, want %v untouched", err, tt.ret)
			}

			entries := logs.AllUntimed()
			if len(entries) != 1 {
				t.Fatalf("got %d log entries, want 1: %v", len(entries), entries)
			}
			e := entries[0]
			if e.Level != tt.wantLevel {
				t.Errorf("level = %v, want %v", e.Level, tt.wantLevel)
			}
			f := e.ContextMap()
			if f["msg_id"] != "msg-7" {
				t.Errorf("msg_id = %v, want msg-7", f["msg_id"])
			}
			if f["dequeue_count"] != int64(3) {
				t.Errorf("dequeue_count = %#v, want 3", f["dequeue_count"])
			}
			if _, ok := f["duration"].(time.Duration); !ok {
				t.Errorf("duration = %#v, want a time.Duration", f["duration"])
			}
			if tt.ret == nil {
				if _, ok := f["error"]; ok {
					t.Errorf("error field on success: %v", f["error"])
				}
			} else if f["error"] != tt.ret.Error() {
				t.Errorf("error = %v, want %q", f["error"], tt.ret.Error())
			}
			_, isPanic := tt.ret.(*handler.PanicError)
			if stack, ok := f["stack"]; ok != isPanic || (isPanic && stack != "goroutine 1") {
				t.Errorf("stack = %#v, want it exactly for panics", stack)
			}
			if strings.Contains(fmt.Sprint(e.Message, f), "4111") {
				t.Errorf("the body was logged: %q %v", e.Message, f)
			}
		})
	}
}

func TestLoggingLevelsAndNil(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	h := handler.Chain(func(context.Context, *queue.Message) error { return nil }, handler.Logging(zap.New(core)))
	if err := h(context.Background(), &queue.Message{ID: "m"}); err != nil {
		t.Fatal(err)
	}
	if n := logs.Len(); n != 0 {
		t.Errorf("success logged %d entries at info level, want 0", n)
	}

	want := errors.New("x")
	h = handler.Chain(func(context.Context, *queue.Message) error { return want }, handler.Logging(nil))
	if err := h(context.Background(), &queue.Message{ID: "m"}); err != want {
		t.Errorf("nil logger: err = %v, want %v", err, want)
	}
}
