package listener_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/scaling"
)

// Many wakes of a parked task (each: the trigger floor, a get, an idle
// sleep) leave no timer and no goroutine behind.
func TestReviewParkCyclesLeaveNoTimersOrGoroutines(t *testing.T) {
	rec := newRecorder()
	f := newFixture(t, rec.handle, listener.Options{Tasks: 2, Idle: scaling.IdleBackoff{Min: time.Second, Max: time.Minute}})
	f.start()
	f.settle()
	pending, goroutines := f.clock.Pending(), runtime.NumGoroutine()
	for i := range 300 {
		gets := getsOf(f)
		f.l.Wake()
		for step := 0; getsOf(f) < gets+int64(f.l.ActiveTasks()); step++ {
			if step == 1000 {
				t.Fatalf("cycle %d: the tasks did not get after a wake", i)
			}
			f.clock.Advance(time.Millisecond)
			time.Sleep(50 * time.Microsecond)
		}
		f.settle()
	}
	if p := f.clock.Pending(); p > pending {
		t.Fatalf("%d timers pending after 300 wakes, %d before", p, pending)
	}
	eventually(t, "the goroutines back to their number", func() bool { return runtime.NumGoroutine() <= goroutines })
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
}

// Shutdown while a message is held leaves no timer of the listener behind
// once Wait has returned (the pause's timer included).
func TestReviewNoTimerOutlivesWaitAfterAWorkerFault(t *testing.T) {
	h := func(context.Context, *queue.Message) error { return emfile() }
	f := newFixture(t, h, listener.Options{VisibilityTimeout: 30 * time.Second, Idle: poisonIdle,
		ErrorBackoffInitial: 10 * time.Second, ErrorBackoffMax: time.Minute, Dispatch: listener.DispatchParallel})
	f.put(1)
	f.start()
	eventually(t, "the first fault", func() bool { return f.l.Stats().WorkerFaults == 1 })
	f.cancel()
	f.cancel = nil
	select {
	case err := <-f.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return without a move of the clock")
	}
	if d := f.clock.Deadlines(); len(d) != 0 {
		t.Fatalf("timers pending after Wait returned, in: %v", d)
	}
}

// A worker fault of a handler that was running when shutdown began hands
// the message back at once; Wait returns.
func TestReviewWorkerFaultDuringShutdownHandsBack(t *testing.T) {
	running := make(chan struct{})
	var runs atomic.Int32
	h := func(ctx context.Context, _ *queue.Message) error {
		runs.Add(1)
		close(running)
		<-ctx.Done() // the grace period ends
		return emfile()
	}
	f := newFixture(t, h, listener.Options{VisibilityTimeout: 30 * time.Second, Idle: poisonIdle, ShutdownGrace: 5 * time.Second})
	f.put(1)
	f.start()
	<-running
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	if s := f.l.Stats(); runs.Load() != 1 || s.Released != 1 || s.WorkerFaults != 1 {
		t.Fatalf("stats %+v, %d runs: want the message handed back once", s, runs.Load())
	}
}

// Resize to fewer tasks while a message is held: it still runs again when
// the pause ends, once.
func TestReviewResizeWhileHeld(t *testing.T) {
	var runs atomic.Int32
	h := func(context.Context, *queue.Message) error {
		if runs.Add(1) == 1 {
			return emfile()
		}
		return nil
	}
	f := newFixture(t, h, listener.Options{Tasks: 3, MaxTasks: 3, VisibilityTimeout: 30 * time.Second, Idle: poisonIdle,
		ErrorBackoffInitial: 10 * time.Second, ErrorBackoffMax: time.Minute, Dispatch: listener.DispatchParallel})
	f.put(1)
	f.start()
	eventually(t, "the first fault", func() bool { return f.l.Stats().WorkerFaults == 1 })
	f.l.Resize(1)
	eventually(t, "one task", func() bool { return f.l.ActiveTasks() == 1 })
	advanceUntil(t, f, "the run in place", func() bool { return f.l.Stats().Deleted == 1 })
	if runs.Load() != 2 {
		t.Fatalf("%d runs, want 2", runs.Load())
	}
}

// The pause's end and shutdown race: whichever wins, the message runs at
// most twice (never twice at once), and is either deleted or handed back.
func TestReviewPauseEndRacingStop(t *testing.T) {
	for i := range 30 {
		var c concurrency
		h := func(context.Context, *queue.Message) error {
			c.enter()
			defer c.leave()
			if c.runs.Load() == 1 {
				return emfile()
			}
			return nil
		}
		f := newFixture(t, h, listener.Options{VisibilityTimeout: 30 * time.Second, Idle: poisonIdle,
			ErrorBackoffInitial: time.Second, ErrorBackoffMax: time.Minute, Dispatch: listener.DispatchParallel})
		f.put(1)
		f.start()
		eventually(t, "the first fault", func() bool { return f.l.Stats().WorkerFaults == 1 })
		go f.clock.Advance(time.Second)
		if err := f.stop(); err != nil {
			t.Fatal(err)
		}
		s := f.l.Stats()
		if c.runs.Load() > 2 || c.max.Load() > 1 || s.Deleted+s.Released != 1 {
			t.Fatalf("round %d: stats %+v, %d runs, %d at once", i, s, c.runs.Load(), c.max.Load())
		}
		if s.Deleted == 0 && f.depth() != 1 {
			t.Fatalf("round %d: the message is neither deleted nor in the queue", i)
		}
	}
}

// Abort while a message is held hands it back once; it is not run again
// by its runner.
func TestReviewAbortWhileHeldHandsBack(t *testing.T) {
	var runs atomic.Int32
	h := func(context.Context, *queue.Message) error {
		if runs.Add(1) == 1 {
			return emfile()
		}
		return nil
	}
	f := newFixture(t, h, listener.Options{VisibilityTimeout: 30 * time.Second, Idle: poisonIdle,
		ErrorBackoffInitial: 10 * time.Second, ErrorBackoffMax: time.Minute, Dispatch: listener.DispatchParallel})
	f.put(1)
	f.start()
	eventually(t, "the first fault", func() bool { return f.l.Stats().WorkerFaults == 1 })
	f.l.Abort()
	eventually(t, "the hand-back", func() bool { return f.l.Stats().Released == 1 })
	advanceUntil(t, f, "the second delivery's run", func() bool { return f.l.Stats().Deleted == 1 })
	if runs.Load() != 2 || f.l.Stats().WorkerFaults != 1 {
		t.Fatalf("%d runs, stats %+v: want the aborted hold handed back and run once more, as a new delivery", runs.Load(), f.l.Stats())
	}
}

// A worker fault in a batch run inline (fast handlers) is held and run
// again once; its batch's other messages run meanwhile.
func TestReviewInlineWorkerFault(t *testing.T) {
	rec := newRecorder()
	var faulted atomic.Bool
	h := func(ctx context.Context, m *queue.Message) error {
		if string(m.Body) == "m3" && faulted.CompareAndSwap(false, true) {
			return emfile()
		}
		return rec.handle(ctx, m)
	}
	f := newFixture(t, h, listener.Options{VisibilityTimeout: 30 * time.Second, Idle: poisonIdle, BatchSize: 8,
		ErrorBackoffInitial: 10 * time.Second, ErrorBackoffMax: time.Minute})
	f.put(1) // warms the handler's average: the next batches run inline
	f.start()
	advanceUntil(t, f, "the first message", func() bool { return f.l.Stats().Deleted == 1 })
	f.put(8)
	advanceUntil(t, f, "all deleted", func() bool { return f.l.Stats().Deleted == 9 })
	if rec.distinct() != 9 || f.l.Stats().WorkerFaults != 1 || f.l.Stats().Released != 0 {
		t.Fatalf("%d distinct runs, stats %+v", rec.distinct(), f.l.Stats())
	}
}
