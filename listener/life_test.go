package listener_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/scaling"
)

// The five ways a message could be lost, stranded or run wrong that issue
// 11 reproduced; each test failed on the listener before it.

// warmUp starts the listener on 200 fast messages, so that it runs later
// batches inline, and waits until every task sleeps.
func warmUp(t *testing.T, f *fixture) {
	t.Helper()
	f.put(200)
	f.start()
	eventually(t, "the warm-up is deleted", func() bool { return f.l.Stats().Deleted >= 200 })
	f.settle()
}

func TestAbortCancelsRunningHandlersAndNothingAfter(t *testing.T) {
	var blockID atomic.Value
	blockID.Store("")
	cancelled := make(chan string, 1)
	blocking := make(chan struct{}, 1)
	var lateCancelled atomic.Int32
	rec := newRecorder()
	h := func(ctx context.Context, m *queue.Message) error {
		if m.ID == blockID.Load() {
			blocking <- struct{}{}
			<-ctx.Done()
			cancelled <- m.ID
			return ctx.Err()
		}
		if ctx.Err() != nil {
			lateCancelled.Add(1)
			return ctx.Err()
		}
		return rec.handle(ctx, m)
	}
	f := newFixture(t, h, listener.Options{Tasks: 1, ShutdownGrace: 50 * time.Millisecond})
	warmUp(t, f)
	ids := f.put(3)
	blockID.Store(ids[0])
	f.clock.AdvanceToNext()
	<-blocking
	f.l.Abort()
	if id := <-cancelled; id != ids[0] {
		t.Fatalf("Abort cancelled %s", id)
	}
	// Abort stops nothing: later messages run with live contexts.
	eventually(t, "the rest of the batch is handled", func() bool { return rec.distinct() == 202 })
	f.settle()
	f.put(3)
	f.clock.AdvanceToNext()
	eventually(t, "later batches are handled", func() bool { return rec.distinct() == 205 })
	eventually(t, "and deleted", func() bool { return f.l.Stats().Deleted == 205 })
	if n := lateCancelled.Load(); n != 0 {
		t.Fatalf("%d handlers started after Abort got a cancelled context", n)
	}
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.l.State(context.Background()); st.InFlight != 0 || st.ActiveTasks != 0 {
		t.Fatalf("%d messages in flight and %d tasks after Wait", st.InFlight, st.ActiveTasks)
	}
}

func TestStallAfterAHandOffStillSpillsTheNextBatch(t *testing.T) {
	gateA, gateB := make(chan struct{}), make(chan struct{})
	startedB := make(chan struct{})
	var slowA, slowB atomic.Value
	slowA.Store("")
	slowB.Store("")
	rec := newRecorder()
	h := func(ctx context.Context, m *queue.Message) error {
		switch m.ID {
		case slowA.Load():
			<-gateA
		case slowB.Load():
			close(startedB)
			<-gateB
		}
		return rec.handle(ctx, m)
	}
	f := newFixture(t, h, listener.Options{Tasks: 1, BatchSize: 2})
	warmUp(t, f)
	ids := f.put(4) // batch A: slowA, fastA; batch B: slowB, fastB
	slowA.Store(ids[0])
	slowB.Store(ids[2])
	f.clock.AdvanceToNext()
	// A stalls, spills fastA and hands the task on; the task fetches B,
	// whose slowB stalls in turn. Now A's handler returns.
	<-startedB
	close(gateA)
	// B's watchdog must still spill fastB past the blocked slowB.
	eventually(t, "fastB runs while slowB blocks", func() bool { return rec.count(ids[3]) == 1 })
	close(gateB)
	eventually(t, "all are deleted", func() bool { return f.l.Stats().Deleted == 204 })
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
}

func TestRestartAfterResizeDuringGetsStartsClean(t *testing.T) {
	held := &heldGets{release: make(chan struct{})}
	rec := newRecorder()
	f := newFixtureWith(t, rec.handle, listener.Options{Tasks: 4, Concurrency: 256}, func(q driver.Queue) driver.Queue { held.Queue = q; return held })
	f.start()
	eventually(t, "four gets are on their way", func() bool { return held.inside.Load() == 4 })
	f.l.Resize(1)
	f.cancel()
	f.cancel = nil
	close(held.release)
	if err := <-f.done; err != nil {
		t.Fatal(err)
	}
	if n := f.l.ActiveTasks(); n != 0 {
		t.Fatalf("ActiveTasks %d after Wait, want 0", n)
	}
	// A second run starts from clean counters and works.
	f.put(10)
	f.startN(2)
	eventually(t, "the second run handles the messages", func() bool { return rec.distinct() == 10 })
	if n := f.l.ActiveTasks(); n != 2 {
		t.Fatalf("ActiveTasks %d in the second run, want 2", n)
	}
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	if n := f.l.ActiveTasks(); n != 0 {
		t.Fatalf("ActiveTasks %d after the second Wait, want 0", n)
	}
}

func TestSettlingDoesNotRaceRenewal(t *testing.T) {
	const vis = 10 * time.Second
	dels := &heldDeletes{entered: make(chan struct{}, 1), release: make(chan struct{})}
	h := func(context.Context, *queue.Message) error {
		return handler.Permanent(errors.New("bad body"))
	}
	f := newFixtureWith(t, h, listener.Options{}, func(q driver.Queue) driver.Queue { dels.Queue = q; return dels })
	poison, err := f.raw.Sibling(context.Background(), "work-poison")
	if err != nil {
		t.Fatal(err)
	}
	l, err := listener.New(f.q, h, listener.Options{VisibilityTimeout: vis, Dispatch: listener.DispatchParallel, Poison: poison, Clock: f.clock})
	if err != nil {
		t.Fatal(err)
	}
	f.l = l
	f.put(1)
	f.start()
	<-dels.entered // put to the poison queue; the delete from this one is slow
	// Half the visibility timeout passes meanwhile: the message is no
	// longer the renewal's to extend.
	f.clock.Advance(vis / 2)
	time.Sleep(50 * time.Millisecond) // give a wrong renewal its chance
	close(dels.release)
	eventually(t, "the message is poisoned", func() bool { return f.l.Stats().Poisoned == 1 })
	f.clock.Advance(2 * vis) // had the delete failed, the message would be back
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	if d := f.depth(); d != 0 {
		t.Fatalf("the poisoned message is still in its queue (%d)", d)
	}
	if n, _ := poison.Count(context.Background()); n != 1 {
		t.Fatalf("poison queue holds %d copies, want 1", n)
	}
	if s := f.l.Stats(); s.Renewed != 0 || s.Poisoned != 1 {
		t.Fatalf("stats %+v: the settling message was renewed under its settler", s)
	}
}

// startN starts the listener again with n tasks, as start does.
func (f *fixture) startN(n int) {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.done = make(chan error, 1)
	if err := f.l.Start(ctx, n); err != nil {
		f.t.Fatal(err)
	}
	go func() { f.done <- f.l.Wait() }()
}

// Suspected in issue 11 and real: the old drain waited on the batches'
// WaitGroup from a goroutine of its own, which could outlive Wait and race
// the next run's batches. Many short runs back to back, under -race.
func TestBackToBackRunsShareNothing(t *testing.T) {
	raw, err := memory.NewStore().Queue("cycles")
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	l, err := listener.New(raw, rec.handle, listener.Options{Tasks: 2, ShutdownGrace: time.Millisecond,
		Idle: scaling.IdleBackoff{Min: time.Millisecond, Max: 2 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i++ {
		for j := 0; j < 20; j++ {
			if _, err := raw.Put(context.Background(), []byte("x"), queue.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		if err := l.Start(ctx, 1+i%3); err != nil {
			t.Fatal(err)
		}
		for l.Stats().Deleted < int64(10*(i+1)) {
			time.Sleep(100 * time.Microsecond)
		}
		cancel()
		if err := l.Wait(); err != nil {
			t.Fatal(err)
		}
		if n := l.ActiveTasks(); n != 0 {
			t.Fatalf("run %d: ActiveTasks %d after Wait", i, n)
		}
	}
}
