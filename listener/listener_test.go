package listener_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/scaling"
)

func TestDrainsEveryMessageWithFewCalls(t *testing.T) {
	rec := newRecorder()
	f := newFixture(t, rec.handle, listener.Options{Tasks: 16, Concurrency: 16 * 48})
	const n = 10_000
	ids := f.put(n)
	f.start()
	eventually(t, "every message is deleted", func() bool { return f.l.Stats().Deleted == n })
	if err := f.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, id := range ids {
		if c := rec.count(id); c != 1 {
			t.Fatalf("message %s handled %d times, want once", id, c)
		}
	}
	if d := f.depth(); d != 0 {
		t.Fatalf("depth after the drain = %d", d)
	}
	s := f.meter.Snapshot()
	minGets := int64((n + 31) / 32)
	// Each of the 16 tasks may come away with one partial batch at the end.
	if got := s.Calls[meter.Get]; got < minGets || got > minGets+16 {
		t.Errorf("gets that returned messages = %d, want %d..%d", got, minGets, minGets+16)
	}
	if s.Calls[meter.Delete] != 0 {
		t.Errorf("%d single deletes on a batch-deleting driver", s.Calls[meter.Delete])
	}
	if got := s.Calls[meter.DeleteBatch]; got > s.Calls[meter.Get] {
		t.Errorf("delete batches = %d, more than the %d gets", got, s.Calls[meter.Get])
	}
	if s.MessagesDeleted != n {
		t.Errorf("meter counted %d deleted", s.MessagesDeleted)
	}
	t.Logf("calls: %v, %.3f per message", s.Map(), s.CallsPerMessage())
}

func TestIdleBackoffFollowsTheSeedFormula(t *testing.T) {
	idle := scaling.IdleBackoff{Min: 100 * time.Millisecond, Max: 60 * time.Second, Delta: 100 * time.Millisecond}
	f := newFixture(t, newRecorder().handle, listener.Options{Idle: idle})
	f.start()
	check := func(k int) {
		t.Helper()
		f.settle()
		ds := f.clock.Deadlines()
		if len(ds) != 1 {
			t.Fatalf("idle %d: %d timers pending, want the one sleep", k, len(ds))
		}
		lo, hi := idle.DelayWith(k, scaling.JitterMin), idle.DelayWith(k, scaling.JitterMax)
		if ds[0] < lo || ds[0] > hi {
			t.Fatalf("sleep after %d empty gets = %s, want %s..%s", k, ds[0], lo, hi)
		}
		f.clock.AdvanceToNext()
	}
	for k := 1; k <= 12; k++ {
		check(k)
	}
	if got := f.meter.Snapshot().Calls[meter.GetEmpty]; got < 12 {
		t.Fatalf("%d empty gets, want ≥ 12", got)
	}
	// Work resets the count: the next sleep is the first step again.
	f.settle()
	f.put(1)
	f.clock.AdvanceToNext()
	eventually(t, "the message is deleted", func() bool { return f.l.Stats().Deleted == 1 })
	check(1)
	check(2)
}

func TestIdleTasksStopDownToOne(t *testing.T) {
	f := newFixture(t, newRecorder().handle, listener.Options{Tasks: 8, Idle: scaling.IdleBackoff{Max: 10 * time.Second}})
	f.start()
	for steps := 0; f.l.ActiveTasks() > 1; steps++ {
		if steps > 500 {
			t.Fatalf("still %d tasks after %d idle steps", f.l.ActiveTasks(), steps)
		}
		f.settle()
		f.clock.AdvanceToNext()
	}
	// An hour more of idling: the last task keeps polling and never stops.
	before := f.meter.Snapshot().Calls[meter.GetEmpty]
	for end := f.clock.Now().Add(time.Hour); f.clock.Now().Before(end); {
		f.settle()
		if got := f.l.ActiveTasks(); got != 1 {
			t.Fatalf("%d active tasks while idle, want 1", got)
		}
		f.clock.AdvanceToNext()
	}
	polls := f.meter.Snapshot().Calls[meter.GetEmpty] - before
	// At the 10 s maximum one task polls about 360 times an hour.
	if polls < 300 || polls > 400 {
		t.Errorf("%d empty gets in an idle hour with one task at a 10 s maximum, want about 360", polls)
	}
	st, err := f.l.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.TotalTasks != 8 || st.ActiveTasks != 1 {
		t.Errorf("state = %d active of %d total, want 1 of 8", st.ActiveTasks, st.TotalTasks)
	}
}

func TestWorkDetectedOncePerIdleToBusyEdge(t *testing.T) {
	var edges atomic.Int32
	rec := newRecorder()
	f := newFixture(t, rec.handle, listener.Options{
		WorkDetected: func(*listener.Listener) { edges.Add(1) },
	})
	f.put(100) // four batches: busy from the start, so no edge
	f.start()
	eventually(t, "the first 100 are deleted", func() bool { return f.l.Stats().Deleted == 100 })
	f.settle()
	if got := edges.Load(); got != 0 {
		t.Fatalf("WorkDetected fired %d times for work found at start, want 0", got)
	}
	for round := 1; round <= 3; round++ {
		f.put(200) // seven batches after an idle spell: one edge
		f.clock.AdvanceToNext()
		eventually(t, "the round is deleted", func() bool { return f.l.Stats().Deleted == int64(100+200*round) })
		f.settle()
		if got := edges.Load(); got != int32(round) {
			t.Fatalf("after %d idle→busy edges WorkDetected fired %d times", round, got)
		}
	}
	if got := f.l.Stats().WorkDetected; got != 3 {
		t.Errorf("Stats.WorkDetected = %d, want 3", got)
	}
}

func TestFailedMessageReappearsAfterVisibilityTimeout(t *testing.T) {
	var calls sync.Map // id → *atomic.Int32
	h := func(_ context.Context, m *queue.Message) error {
		v, _ := calls.LoadOrStore(m.ID, new(atomic.Int32))
		if v.(*atomic.Int32).Add(1) == 1 {
			return errors.New("first try fails")
		}
		if m.DequeueCount != 2 {
			return errors.New("unexpected dequeue count")
		}
		return nil
	}
	f := newFixture(t, h, listener.Options{VisibilityTimeout: 30 * time.Second})
	f.put(1)
	f.start()
	eventually(t, "the first attempt fails", func() bool { return f.l.Stats().Failed == 1 })
	f.settle()
	if d := f.depth(); d != 1 {
		t.Fatalf("depth after a failure = %d, want 1 (left in the queue)", d)
	}
	// Polls before the timeout do not see it.
	for i := 0; i < 3; i++ {
		f.clock.AdvanceToNext()
		f.settle()
	}
	if got := f.l.Stats().Processed; got != 0 {
		t.Fatalf("message processed before its visibility timeout ended")
	}
	f.clock.Advance(31 * time.Second)
	eventually(t, "the retry succeeds", func() bool { return f.l.Stats().Deleted == 1 })
	if d := f.depth(); d != 0 {
		t.Fatalf("depth = %d after the retry", d)
	}
}

func TestPermanentFailureDoesNotSpin(t *testing.T) {
	var calls atomic.Int32
	h := func(context.Context, *queue.Message) error {
		calls.Add(1)
		return handler.Permanent(errors.New("cannot ever work"))
	}
	f := newFixture(t, h, listener.Options{VisibilityTimeout: 5 * time.Second, Idle: scaling.IdleBackoff{Max: time.Second}})
	f.put(1)
	f.start()
	// Five virtual minutes of polling, well past many visibility timeouts.
	for end := f.clock.Now().Add(5 * time.Minute); f.clock.Now().Before(end); {
		f.settle()
		f.clock.AdvanceToNext()
	}
	if got := calls.Load(); got != 1 {
		t.Fatalf("a permanently failing message ran %d times in 5 minutes, want 1", got)
	}
	if s := f.l.Stats(); s.Hidden != 1 || s.Failed != 1 {
		t.Fatalf("stats %+v: want it failed once and hidden once", s)
	}
	f.clock.Advance(listener.DefaultPermanentRetryDelay)
	eventually(t, "it runs again after the retry delay", func() bool { return calls.Load() == 2 })
}

func TestPanicDoesNotKillTheTask(t *testing.T) {
	rec := newRecorder()
	var once atomic.Bool
	h := func(ctx context.Context, m *queue.Message) error {
		if once.CompareAndSwap(false, true) {
			panic("boom")
		}
		return rec.handle(ctx, m)
	}
	f := newFixture(t, h, listener.Options{Tasks: 1, VisibilityTimeout: 10 * time.Second})
	f.put(50)
	f.start()
	eventually(t, "49 are deleted", func() bool { return f.l.Stats().Deleted == 49 })
	f.settle()
	if got := f.l.ActiveTasks(); got != 1 {
		t.Fatalf("%d tasks after a panic, want 1", got)
	}
	if s := f.l.Stats(); s.Panics != 1 || s.Failed != 1 {
		t.Fatalf("stats %+v: want one panic counted as one failure", s)
	}
	f.clock.Advance(11 * time.Second)
	eventually(t, "the panicked message runs again and is deleted", func() bool { return f.l.Stats().Deleted == 50 })
}

func TestSlowMessageDoesNotHoldBackTheRest(t *testing.T) {
	release := make(chan struct{})
	var slowID atomic.Value
	rec := newRecorder()
	h := func(ctx context.Context, m *queue.Message) error {
		if m.ID == slowID.Load() {
			<-release
		}
		return rec.handle(ctx, m)
	}
	f := newFixture(t, h, listener.Options{Tasks: 1})
	ids := f.put(200)
	slowID.Store(ids[0])
	f.start()
	// Wait for their runners to count them succeeded, not only for the
	// handlers to have seen them: a runner descheduled between its handler's
	// return and that mark would otherwise miss the flush below, and the
	// next one a second later, which this test never reaches. (The flush
	// timer itself is armed before the first handler starts: the first
	// batch, holding the slow message, is dispatched in parallel.)
	eventually(t, "the other 199 succeed", func() bool { return f.l.Stats().Processed == 199 })
	if rec.distinct() != 199 {
		t.Fatalf("%d messages handled, want 199", rec.distinct())
	}
	// Their deletes do not wait for the slow one: a flush comes within a
	// second of virtual time.
	f.clock.Advance(time.Second)
	eventually(t, "the other 199 are deleted", func() bool { return f.l.Stats().Deleted == 199 })
	if rec.count(ids[0]) != 0 {
		t.Fatal("the slow message finished early")
	}
	close(release)
	eventually(t, "the slow one is deleted", func() bool { return f.l.Stats().Deleted == 200 })
}

func TestTransientGetErrorsNeverEndTheListener(t *testing.T) {
	rec := newRecorder()
	var fl *flakyGets
	f := newFixtureWith(t, rec.handle, listener.Options{ErrorBackoffInitial: time.Second, ErrorBackoffMax: 8 * time.Second},
		func(q driver.Queue) driver.Queue {
			fl = &flakyGets{Queue: q, fails: 6, retryAfter: 20 * time.Second}
			return fl
		})
	f.put(10)
	f.start()
	for i := 0; i < 6; i++ {
		eventually(t, "the task sleeps after a failed get", func() bool {
			return f.clock.Pending() == 1 && f.l.Stats().GetErrors == int64(i+1)
		})
		d := f.clock.Deadlines()[0]
		if i == 3 {
			// The fourth error carries a server hint, longer than the backoff.
			if d != 20*time.Second {
				t.Fatalf("after an error with Retry-After 20s the task sleeps %s", d)
			}
		} else if d > 12*time.Second {
			t.Fatalf("backoff %s beyond its 8 s maximum plus jitter", d)
		}
		f.clock.AdvanceToNext()
	}
	eventually(t, "all 10 are deleted", func() bool { return f.l.Stats().Deleted == 10 })
	s := f.l.Stats()
	if s.GetErrors != 6 || s.TransientErrors != 6 {
		t.Fatalf("stats %+v: want 6 transient get errors", s)
	}
	if got := f.meter.Snapshot().Errors[meter.GetEmpty]; got != 6 {
		t.Errorf("meter counted %d failed gets, want 6 (each is billed)", got)
	}
	if f.l.ActiveTasks() != 1 {
		t.Fatal("the task ended")
	}
}

// flakyGets fails the first gets with transient errors; the fourth carries
// a Retry-After hint.
type flakyGets struct {
	driver.Queue
	mu         sync.Mutex
	fails, n   int
	retryAfter time.Duration
}

func (q *flakyGets) Get(ctx context.Context, n int, vis time.Duration) ([]*driver.Message, error) {
	q.mu.Lock()
	q.n++
	k := q.n
	q.mu.Unlock()
	if k <= q.fails {
		var ra time.Duration
		if k == 4 {
			ra = q.retryAfter
		}
		return nil, queue.Transient(errors.New("503 server busy"), ra)
	}
	return q.Queue.Get(ctx, n, vis)
}

func TestStopRequestsNeverEmptyThePool(t *testing.T) {
	// A hook that always asks to stop: the listener keeps MinTasks anyway,
	// even when every task asks at the same moment.
	f := newFixture(t, newRecorder().handle, listener.Options{
		Tasks:      16,
		MinTasks:   2,
		QueueEmpty: func(*listener.Listener, int) (time.Duration, bool) { return time.Second, true },
	})
	f.start()
	for i := 0; i < 50; i++ {
		f.settle()
		if got := f.l.ActiveTasks(); got != 2 {
			t.Fatalf("round %d: %d tasks, want MinTasks 2", i, got)
		}
		f.clock.AdvanceToNext()
	}
	f.put(5)
	f.clock.Advance(time.Second)
	eventually(t, "the remaining tasks still work", func() bool { return f.l.Stats().Deleted == 5 })
}

func TestLongHandlerIsRenewedWithTheNewestReceipt(t *testing.T) {
	const vis = 10 * time.Second
	started := make(chan *queue.Message, 1)
	finish := make(chan struct{})
	h := func(_ context.Context, m *queue.Message) error {
		started <- m
		<-finish
		return nil
	}
	f := newFixture(t, h, listener.Options{
		VisibilityTimeout: vis,
		// The idle task sleeps an hour between its gets, so that the only
		// timer due within a second is the batch's maintenance tick.
		QueueEmpty: func(*listener.Listener, int) (time.Duration, bool) { return time.Hour, false },
	})
	f.put(1)
	f.start()
	m := <-started
	// The maintenance tick (flush and renewal) runs in its own goroutine
	// and re-arms itself from the time it reads: the clock moves only once
	// it has, else a step could pass its renewal deadline before it reads
	// the time, and the renewal would come a step late.
	maintained := func(at string) {
		eventually(t, "the batch's maintenance tick is armed "+at, func() bool {
			ds := f.clock.Deadlines()
			return len(ds) > 0 && ds[0] <= time.Second
		})
	}
	maintained("at the start") // armed by the dispatch, before the handler ran
	// Thirty virtual seconds, three visibility timeouts, in small steps;
	// another consumer polls all along and must never get the message.
	for i := 0; i < 30; i++ {
		f.clock.Advance(time.Second)
		maintained(fmt.Sprintf("after %ds", i+1))
		if got, want := f.l.Stats().Renewed, int64((i+1)/5); got < want {
			t.Fatalf("at %ds %d renewals, want ≥ %d (every half visibility timeout)", i+1, got, want)
		}
		if ms, err := f.raw.Get(context.Background(), 32, time.Minute); err != nil || len(ms) != 0 {
			t.Fatalf("at %ds another consumer got %d messages (%v) while the handler ran", i+1, len(ms), err)
		}
	}
	close(finish)
	eventually(t, "the message is deleted", func() bool { return f.l.Stats().Deleted == 1 })
	s := f.l.Stats()
	if s.Renewed < 5 || s.ReceiptMismatches != 0 {
		t.Fatalf("stats %+v: want ≥ 5 renewals and the delete done with the newest receipt", s)
	}
	if m.DequeueCount != 1 {
		t.Fatalf("dequeue count %d", m.DequeueCount)
	}
}

func TestStalledInlineBatchHandsTheTaskOn(t *testing.T) {
	release := make(chan struct{})
	var slowID atomic.Value
	slowID.Store("")
	rec := newRecorder()
	h := func(ctx context.Context, m *queue.Message) error {
		if m.ID == slowID.Load() {
			<-release
		}
		return rec.handle(ctx, m)
	}
	f := newFixture(t, h, listener.Options{Tasks: 1})
	f.put(200) // fast: the listener learns to run batches inline
	f.start()
	eventually(t, "the warm-up is deleted", func() bool { return f.l.Stats().Deleted == 200 })
	if avg := f.l.Stats(); avg.Processed != 200 {
		t.Fatal(avg)
	}
	st, _ := f.l.State(context.Background())
	if st.HandlerTime <= 0 || st.HandlerTime > 100*time.Microsecond {
		t.Logf("handler time %s: the batch may not run inline", st.HandlerTime)
	}
	f.settle()
	ids := f.put(300)
	slowID.Store(ids[0]) // first message of the next batch blocks
	f.clock.AdvanceToNext()
	// The rest of its batch and the 268 messages behind it are handled by
	// the task, which went on without the stalled goroutine.
	// Succeeded, not only seen by the handler: a spilled runner descheduled
	// before it marks its message succeeded would miss the flush below.
	eventually(t, "the other 299 succeed", func() bool { return f.l.Stats().Processed == 499 })
	if got := rec.distinct(); got != 499 {
		t.Fatalf("%d messages handled, want 499", got)
	}
	f.clock.Advance(time.Second) // the stalled batch's flush
	eventually(t, "the other 299 are deleted", func() bool { return f.l.Stats().Deleted == 499 })
	if got := f.l.ActiveTasks(); got != 1 {
		t.Fatalf("%d active tasks after a hand-off, want 1", got)
	}
	close(release)
	eventually(t, "the slow one is deleted", func() bool { return f.l.Stats().Deleted == 500 })
	f.settle()
	st, _ = f.l.State(context.Background())
	if st.ActiveTasks != 1 || st.TotalTasks != 1 {
		t.Fatalf("after the hand-off: %d active of %d started, want 1 of 1", st.ActiveTasks, st.TotalTasks)
	}
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
}
