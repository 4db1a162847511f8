package listener_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/meter"
)

// A handler that fails because the worker itself is out of resources
// ("too many open files") says nothing about the message: the failure does
// not count towards poisoning, and the message, still held by the same
// delivery, runs again here when the worker has what it needs (its dequeue
// count stays 1).
func TestWorkerOutOfResourcesDoesNotCountTowardsPoisoning(t *testing.T) {
	var runs, lastCount atomic.Int32
	h := func(_ context.Context, m *queue.Message) error {
		lastCount.Store(int32(m.DequeueCount))
		if runs.Add(1) <= 4 {
			return fmt.Errorf("handler: exec %q: fork/exec /bin/true: %w", "true", syscall.EMFILE)
		}
		return nil
	}
	f, pq := poisonFixture(t, h, listener.Options{MaxDequeueCount: 2, VisibilityTimeout: 30 * time.Second, Idle: poisonIdle}, nil)
	f.put(1)
	f.start()
	// Bounded by steps of the virtual clock, not by time: the pauses
	// (1 s, 2 s, 4 s, 8 s) and idle sleeps take a few hundred.
	advanceUntil(t, f, "a verdict", func() bool { return f.l.Stats().Processed+f.l.Stats().Poisoned > 0 })
	s := f.l.Stats()
	if s.Poisoned != 0 {
		t.Fatalf("stats %+v: a message the worker could not run for want of its own resources was poisoned", s)
	}
	if s.Processed != 1 || s.WorkerFaults != 4 || s.Released != 0 || lastCount.Load() != 1 {
		t.Fatalf("stats %+v, dequeue count %d: want 4 worker faults, each run again in place, then the run that succeeded, all one delivery", s, lastCount.Load())
	}
	if n, _ := pq.Count(context.Background()); n != 0 {
		t.Fatalf("the poison queue holds %d", n)
	}
}

// After such a failure the listener's tasks get nothing for a while,
// doubling while the faults go on, so that a starved worker does not take
// message after message it cannot run; the failed message runs again when
// the pause ends.
func TestWorkerOutOfResourcesPausesTheGets(t *testing.T) {
	h := func(context.Context, *queue.Message) error {
		return fmt.Errorf("open /tmp/x: %w", syscall.ENFILE)
	}
	f := newFixture(t, h, listener.Options{VisibilityTimeout: 30 * time.Second, Idle: poisonIdle,
		ErrorBackoffInitial: 10 * time.Second, ErrorBackoffMax: time.Minute})
	f.put(1)
	f.start()
	eventually(t, "the first fault", func() bool { return f.l.Stats().WorkerFaults == 1 })
	gets := getsOf(f)
	// Within the 10 s pause the message, visible again, is not got.
	for range 9 {
		f.clock.Advance(time.Second)
		time.Sleep(time.Millisecond) // lets a task that would get do so; the assertion does not depend on it
	}
	if got := getsOf(f); got != gets || f.l.Stats().WorkerFaults != 1 {
		t.Fatalf("%d gets and %d faults within the pause, want none", got-gets, f.l.Stats().WorkerFaults-1)
	}
	f.clock.Advance(2 * time.Second)
	eventually(t, "the second fault after the pause", func() bool { return f.l.Stats().WorkerFaults == 2 })
}

// getsOf counts the gets the fixture's listener made, empty or not.
func getsOf(f *fixture) int64 {
	c := f.meter.Snapshot().Calls
	return c[meter.Get] + c[meter.GetEmpty]
}

// jumpClock is a fake clock whose wall time an operator (or NTP) can set
// back or forward: Now moves by the jump, timers do not (Go's timers, and
// the monotonic reading of time.Now, ignore such a jump).
type jumpClock struct {
	*clock.Fake
	offset atomic.Int64
}

func (c *jumpClock) Now() time.Time { return c.Fake.Now().Add(time.Duration(c.offset.Load())) }

// The pause after a worker fault is measured on the clock's timers, never
// by comparing wall times: setting the clock back an hour during a pause
// neither stretches it by an hour nor makes the next fault's pause look
// already in force.
func TestWorkerFaultPauseIgnoresAWallClockJump(t *testing.T) {
	h := func(context.Context, *queue.Message) error {
		return fmt.Errorf("open /tmp/x: %w", syscall.EMFILE)
	}
	o := listener.Options{VisibilityTimeout: time.Minute, Idle: poisonIdle,
		ErrorBackoffInitial: 10 * time.Second, ErrorBackoffMax: time.Minute}
	f := newFixture(t, h, o)
	jc := &jumpClock{Fake: f.clock}
	o.Clock = jc
	l, err := listener.New(f.q, h, o)
	if err != nil {
		t.Fatal(err)
	}
	f.l = l
	f.put(1)
	f.start()
	eventually(t, "the first fault", func() bool { return f.l.Stats().WorkerFaults == 1 })
	jc.offset.Store(int64(-time.Hour))
	for range 11 {
		f.clock.Advance(time.Second)
		time.Sleep(time.Millisecond) // lets the tasks and runners move; the assertions do not depend on it
	}
	eventually(t, "the second fault, 10 s after the first", func() bool { return f.l.Stats().WorkerFaults == 2 })
	for range 21 {
		f.clock.Advance(time.Second)
		time.Sleep(time.Millisecond)
	}
	eventually(t, "the third fault, 20 s after the second", func() bool { return f.l.Stats().WorkerFaults == 3 })
}

// A restart loses the listener's memory of worker faults, but the dequeue
// count, kept by the backend, is all a new listener sees. Worker faults do
// not raise it (the message is run again in place, one delivery), so a
// message that met many of them, more than the maximum dequeue count, in
// a worker that was then restarted is run by the next one, not poisoned
// unrun as a crash-looping message would be.
func TestWorkerFaultsBeforeARestartDoNotPoisonTheMessageUnrun(t *testing.T) {
	var faults atomic.Int32
	starved := func(context.Context, *queue.Message) error {
		faults.Add(1)
		return fmt.Errorf("fork/exec /bin/true: %w", syscall.EMFILE)
	}
	o := listener.Options{MaxDequeueCount: 2, VisibilityTimeout: 30 * time.Second, Idle: poisonIdle,
		ErrorBackoffInitial: time.Second, ErrorBackoffMax: 4 * time.Second}
	f, pq := poisonFixture(t, starved, o, nil)
	id := f.put(1)[0]
	f.start()
	advanceUntil(t, f, "5 worker faults", func() bool { return faults.Load() >= 5 })
	f.stop() // the restart: the message is handed back
	if s := f.l.Stats(); s.Poisoned != 0 || s.Processed != 0 {
		t.Fatalf("the starved worker's stats %+v", s)
	}

	var ran atomic.Int32
	var count atomic.Int32
	healthy := func(_ context.Context, m *queue.Message) error {
		ran.Add(1)
		count.Store(int32(m.DequeueCount))
		return nil
	}
	o.Poison, o.Clock = f.l.Options().Poison, f.clock
	l2, err := listener.New(f.q, healthy, o)
	if err != nil {
		t.Fatal(err)
	}
	f.l = l2
	f.start()
	advanceUntil(t, f, "a verdict after the restart", func() bool { return l2.Stats().Processed+l2.Stats().Poisoned > 0 })
	if s := l2.Stats(); s.Poisoned != 0 || s.Processed != 1 || ran.Load() != 1 {
		t.Fatalf("after the restart: stats %+v, %d runs: want the message run, not poisoned unrun", s, ran.Load())
	}
	if n, _ := pq.Count(context.Background()); n != 0 {
		t.Fatalf("the poison queue holds %d", n)
	}
	if int(count.Load()) > o.MaxDequeueCount {
		t.Fatalf("message %s ran with dequeue count %d, above the maximum %d", id, count.Load(), o.MaxDequeueCount)
	}
}

// advanceUntil moves the fixture's clock from timer to timer until cond
// holds: bounded by steps of the virtual clock, not by time.
func advanceUntil(t *testing.T, f *fixture, what string, cond func() bool) {
	t.Helper()
	for step := 0; !cond(); step++ {
		if step == 5000 {
			t.Fatalf("no %s after %d steps of the clock; stats %+v", what, step, f.l.Stats())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ok := f.clock.WaitPending(ctx, 1)
		cancel()
		if !ok {
			t.Fatalf("no %s, and no timer pending; stats %+v", what, f.l.Stats())
		}
		f.clock.AdvanceToNext()
		time.Sleep(time.Millisecond) // lets the goroutines woken move; the outcome does not depend on it
	}
}
