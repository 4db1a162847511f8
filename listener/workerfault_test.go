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
// not count towards poisoning, the message is handed back at once, and it
// runs when the worker has what it needs again.
func TestWorkerOutOfResourcesDoesNotCountTowardsPoisoning(t *testing.T) {
	var runs atomic.Int32
	h := func(context.Context, *queue.Message) error {
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
	for step := 0; f.l.Stats().Processed == 0 && f.l.Stats().Poisoned == 0 && step < 2000; step++ {
		f.settle()
		f.clock.AdvanceToNext()
	}
	s := f.l.Stats()
	if s.Poisoned != 0 {
		t.Fatalf("stats %+v: a message the worker could not run for want of its own resources was poisoned", s)
	}
	if s.Processed != 1 || s.WorkerFaults != 4 || s.Released != 4 {
		t.Fatalf("stats %+v: want 4 worker faults, each released at once, then the run that succeeded", s)
	}
	if n, _ := pq.Count(context.Background()); n != 0 {
		t.Fatalf("the poison queue holds %d", n)
	}
}

// After such a failure the listener's tasks get nothing for a while,
// doubling while the faults go on, so that a starved worker does not take
// message after message only to hand each back.
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
