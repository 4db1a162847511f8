package listener_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
)

// A panic in the run after a worker fault's pause is the handler's
// verdict too, a *handler.PanicError, and the task lives on.
func TestPanicInTheRunAfterAWorkerFaultIsRecovered(t *testing.T) {
	var runs atomic.Int32
	h := func(_ context.Context, m *queue.Message) error {
		switch runs.Add(1) {
		case 1:
			return fmt.Errorf("open /tmp/x: %w", syscall.EMFILE)
		case 2:
			panic("boom after the pause")
		}
		return nil
	}
	f := newFixture(t, h, listener.Options{Tasks: 1, VisibilityTimeout: 30 * time.Second, Idle: poisonIdle})
	f.put(1)
	f.start()
	advanceUntil(t, f, "the panic", func() bool { return f.l.Stats().Panics == 1 })
	if s := f.l.Stats(); s.WorkerFaults != 1 || s.Failed != 2 || s.Processed != 0 {
		t.Fatalf("stats %+v: want one worker fault, then one panic, both failures", s)
	}
	advanceUntil(t, f, "the next delivery succeeds", func() bool { return f.l.Stats().Deleted == 1 })
	if got := f.l.ActiveTasks(); got != 1 {
		t.Fatalf("%d tasks after the panic, want 1", got)
	}
}

// panic(nil) is a panic too (a *runtime.PanicNilError since Go 1.21), as
// handler.Recover counts it, now that the listener recovers panics itself.
func TestPanicNilIsCountedAsAPanic(t *testing.T) {
	h := func(_ context.Context, m *queue.Message) error {
		if string(m.Body) == "m0" {
			panic(nil)
		}
		panic("boom")
	}
	f := newFixture(t, h, listener.Options{Tasks: 1, VisibilityTimeout: time.Hour})
	f.put(2)
	f.start()
	eventually(t, "two panics", func() bool { return f.l.Stats().Panics == 2 })
	if s := f.l.Stats(); s.Failed != 2 || s.Processed != 0 || s.Deleted != 0 {
		t.Fatalf("stats %+v: want two failures, nothing deleted", s)
	}
	if got := f.l.ActiveTasks(); got != 1 {
		t.Fatalf("%d tasks after the panics, want 1", got)
	}
}

// A batch's completion leaves the states of its succeeded messages as
// they are (issue 34: no atomic write a message): a context kept past its
// handler's return still settles nothing once the batch is done, and
// nothing is deleted twice.
func TestKeptContextSettlesNothingAfterItsBatchCompleted(t *testing.T) {
	var mu sync.Mutex
	var kept context.Context
	var msg *queue.Message
	h := func(ctx context.Context, m *queue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if kept == nil || ctx == kept {
			kept, msg = ctx, m // the last message of the first runner
		}
		return nil
	}
	for _, d := range []listener.Dispatch{listener.DispatchParallel, listener.DispatchAuto} {
		mu.Lock()
		kept, msg = nil, nil
		mu.Unlock()
		f := newFixture(t, h, listener.Options{Tasks: 1, Dispatch: d})
		f.put(3)
		f.start()
		advanceUntil(t, f, "three deletes", func() bool { return f.l.Stats().Deleted == 3 })
		mu.Lock()
		called := false
		err := queue.SettleTx(kept, msg, func(string) error { called = true; return nil })
		mu.Unlock()
		if !errors.Is(err, queue.ErrReceiptMismatch) || called {
			t.Fatalf("dispatch %v: settling through a context kept past its completed batch: %v (delete called: %v), want ErrReceiptMismatch and no delete", d, err, called)
		}
		if s := f.l.Stats(); s.Deleted != 3 || s.Processed != 3 {
			t.Fatalf("dispatch %v: stats %+v", d, s)
		}
		f.stop()
	}
}
