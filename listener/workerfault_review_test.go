package listener_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// Adversarial review of the worker fault run in place (a message held
// through the gets' pause, renewed, run again by its runner).

func emfile() error { return fmt.Errorf("open /tmp/x: %w", syscall.EMFILE) }

// renewals fails every renewal (an UpdateVisibility that extends) with err
// once armed; releases (visibility 0) pass.
type renewals struct {
	driver.Queue
	armed atomic.Bool
	err   error
	calls atomic.Int32
}

func (q *renewals) UpdateVisibility(ctx context.Context, id, receipt string, d time.Duration) (string, error) {
	if d > 0 && q.armed.Load() {
		q.calls.Add(1)
		return "", q.err
	}
	return q.Queue.UpdateVisibility(ctx, id, receipt, d)
}

// concurrency records how many runs of the handler overlap at most.
type concurrency struct{ now, max, runs atomic.Int32 }

func (c *concurrency) enter() {
	c.runs.Add(1)
	n := c.now.Add(1)
	for {
		m := c.max.Load()
		if n <= m || c.max.CompareAndSwap(m, n) {
			return
		}
	}
}

func (c *concurrency) leave() { c.now.Add(-1) }

// Shutdown while a message is held for a worker fault hands it back once,
// does not run it again, and Wait returns.
func TestReviewShutdownWhileHeldHandsBack(t *testing.T) {
	var runs atomic.Int32
	h := func(context.Context, *queue.Message) error { runs.Add(1); return emfile() }
	f := newFixture(t, h, listener.Options{VisibilityTimeout: 30 * time.Second, Idle: poisonIdle,
		ErrorBackoffInitial: 10 * time.Second, ErrorBackoffMax: time.Minute, Dispatch: listener.DispatchParallel})
	f.put(1)
	f.start()
	eventually(t, "the first fault", func() bool { return f.l.Stats().WorkerFaults == 1 })
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	s := f.l.Stats()
	if runs.Load() != 1 || s.Released != 1 || s.WorkerFaults != 1 || s.Failed != 1 {
		t.Fatalf("stats %+v, %d runs: want the held message handed back once, unrun again", s, runs.Load())
	}
	ms, err := f.raw.Get(context.Background(), 1, time.Second)
	if err != nil || len(ms) != 1 || ms[0].DequeueCount != 2 {
		t.Fatalf("after shutdown: %v, %v: want the message visible at once", ms, err)
	}
}

// A renewal that finds the held message's lease lost (taken, gone) ends
// the hold: the runner neither runs it again nor hands it back.
func TestReviewLeaseLostWhileHeldIsNotRunAgain(t *testing.T) {
	var c concurrency
	var faults atomic.Int32
	h := func(context.Context, *queue.Message) error {
		c.enter()
		defer c.leave()
		if faults.Add(1) == 1 {
			return emfile()
		}
		return nil
	}
	rq := &renewals{err: queue.ErrNotFound}
	f := newFixtureWith(t, h, listener.Options{VisibilityTimeout: 4 * time.Second, Idle: poisonIdle,
		ErrorBackoffInitial: 10 * time.Second, ErrorBackoffMax: time.Minute, Dispatch: listener.DispatchParallel},
		func(q driver.Queue) driver.Queue { rq.Queue = q; return rq })
	f.put(1)
	rq.armed.Store(true)
	f.start()
	advanceUntil(t, f, "the lease lost", func() bool { return f.l.Stats().LeasesLost == 1 })
	rq.armed.Store(false)
	// The pause (10 s) ends; the message, visible again since 4 s, is got
	// again by a task: it runs once more, as a new delivery.
	advanceUntil(t, f, "the second delivery's run", func() bool { return f.l.Stats().Processed == 1 })
	if s := f.l.Stats(); c.runs.Load() != 2 || c.max.Load() != 1 || s.Released != 0 {
		t.Fatalf("stats %+v, %d runs, %d at once: want the lost hold dropped, not run again nor released", s, c.runs.Load(), c.max.Load())
	}
}

// In a batch where one message is held for a worker fault and another
// succeeded, the success is deleted long before its lease ends, not when
// the held message is done.
func TestReviewSuccessBesideAHeldMessageIsDeletedEarly(t *testing.T) {
	h := func(_ context.Context, m *queue.Message) error {
		if string(m.Body) == "m0" {
			return emfile()
		}
		return nil
	}
	vis := 30 * time.Second
	f := newFixture(t, h, listener.Options{VisibilityTimeout: vis, Idle: poisonIdle, BatchSize: 2,
		ErrorBackoffInitial: time.Minute, ErrorBackoffMax: time.Minute})
	f.put(2)
	start := f.clock.Now()
	f.start()
	advanceUntil(t, f, "the success deleted", func() bool { return f.l.Stats().Deleted == 1 })
	if d := f.clock.Now().Sub(start); d >= vis/2 {
		t.Fatalf("the success was deleted %s after the get, its lease is %s", d, vis)
	}
}

// Renewals of a held message fail (the backend is unreachable for them)
// until its lease ends; a competing consumer then gets it. When the pause
// ends the runner must not run it again: it has not held it since the
// lease ended, and the competitor runs it now.
func TestReviewHeldMessagePastItsLeaseIsNotRunAgain(t *testing.T) {
	var c concurrency
	block := make(chan struct{})
	var first atomic.Bool
	h := func(context.Context, *queue.Message) error {
		c.enter()
		defer c.leave()
		if first.CompareAndSwap(false, true) {
			return emfile()
		}
		<-block // the second run, whoever makes it, takes its time
		return nil
	}
	defer close(block)
	rq := &renewals{err: queue.Transient(errors.New("injected 503"), 0)}
	vis := 4 * time.Second
	f := newFixtureWith(t, h, listener.Options{VisibilityTimeout: vis, Idle: poisonIdle,
		ErrorBackoffInitial: 3 * vis, ErrorBackoffMax: time.Minute, Dispatch: listener.DispatchParallel},
		func(q driver.Queue) driver.Queue { rq.Queue = q; return rq })
	f.put(1)
	rq.armed.Store(true)
	f.start()
	eventually(t, "the first fault", func() bool { return f.l.Stats().WorkerFaults == 1 })
	f.clock.Advance(vis + time.Second)
	// The competitor: another worker's get, after the lease ended.
	ms, err := f.raw.Get(context.Background(), 1, time.Minute)
	if err != nil || len(ms) != 1 {
		t.Fatalf("the competitor got %v, %v: want the message, its lease over", ms, err)
	}
	go func() { c.enter() }() // the competitor runs it (and is still running)
	eventually(t, "the competitor's run", func() bool { return c.runs.Load() == 2 })
	// The pause ends.
	for range 12 {
		f.clock.Advance(time.Second)
		time.Sleep(time.Millisecond) // lets the runner move; the assertion does not depend on it
	}
	time.Sleep(20 * time.Millisecond)
	if c.runs.Load() != 2 {
		t.Fatalf("%d runs, %d at once: the runner ran the message again after its lease had ended, while the competitor held it", c.runs.Load(), c.max.Load())
	}
}

// A held message whose time-to-live ends during the pause is not run
// again: the queue no longer has it, and it would never be got again.
func TestReviewHeldMessagePastItsTTLIsNotRunAgain(t *testing.T) {
	var runs atomic.Int32
	h := func(context.Context, *queue.Message) error {
		if runs.Add(1) == 1 {
			return emfile()
		}
		return nil
	}
	f := newFixture(t, h, listener.Options{VisibilityTimeout: time.Minute, Idle: poisonIdle,
		ErrorBackoffInitial: 10 * time.Second, ErrorBackoffMax: time.Minute, Dispatch: listener.DispatchParallel})
	if _, err := f.raw.Put(context.Background(), []byte("short"), queue.PutOptions{TTL: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	f.start()
	eventually(t, "the first fault", func() bool { return f.l.Stats().WorkerFaults == 1 })
	for range 12 {
		f.clock.Advance(time.Second)
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if runs.Load() != 1 {
		t.Fatalf("%d runs: the held message ran again after its time-to-live ended", runs.Load())
	}
}

// With a poison queue, a held message whose time-to-live ended during the
// pause is poisoned rather than lost, as one that expired while its
// handler ran.
func TestReviewHeldMessagePastItsTTLIsPoisoned(t *testing.T) {
	var runs atomic.Int32
	h := func(context.Context, *queue.Message) error { runs.Add(1); return emfile() }
	f, pq := poisonFixture(t, h, listener.Options{VisibilityTimeout: time.Minute, Idle: poisonIdle,
		ErrorBackoffInitial: 10 * time.Second, ErrorBackoffMax: time.Minute, Dispatch: listener.DispatchParallel}, nil)
	if _, err := f.raw.Put(context.Background(), []byte("short"), queue.PutOptions{TTL: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	f.start()
	advanceUntil(t, f, "the poisoning", func() bool { return f.l.Stats().Poisoned == 1 })
	if n, _ := pq.Count(context.Background()); n != 1 || runs.Load() != 1 {
		t.Fatalf("poison queue %d, %d runs: want the expired held message poisoned, unrun again", n, runs.Load())
	}
}
