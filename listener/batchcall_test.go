package listener_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/kithook"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/scaling"
)

// calls records a batch handler's calls: the bodies of each.
type calls struct {
	mu      sync.Mutex
	bodies  [][]string
	outcome func(m *queue.Message) error // nil: all succeed
	running atomic.Int32
	most    atomic.Int32
	gate    chan struct{} // if set, each call waits for a receive from it... or its close
}

func (c *calls) handle(ctx context.Context, ms []*queue.Message) []error {
	n := c.running.Add(1)
	defer c.running.Add(-1)
	for {
		m := c.most.Load()
		if n <= m || c.most.CompareAndSwap(m, n) {
			break
		}
	}
	bs := make([]string, len(ms))
	for i, m := range ms {
		bs[i] = string(m.Body)
	}
	c.mu.Lock()
	c.bodies = append(c.bodies, bs)
	c.mu.Unlock()
	if c.gate != nil {
		<-c.gate
	}
	if c.outcome == nil {
		return nil
	}
	res := make([]error, len(ms))
	for i, m := range ms {
		res[i] = c.outcome(m)
	}
	return res
}

func (c *calls) sizes() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s []int
	for _, b := range c.bodies {
		s = append(s, len(b))
	}
	return s
}

// newBatchFixture is a fixture whose listener calls bh, poisoning into a
// sibling queue.
func newBatchFixture(t *testing.T, bh handler.BatchFunc, o listener.Options) (*fixture, *queue.Queue) {
	t.Helper()
	single := o
	single.BatchMax, single.BatchWait = 0, 0
	f := newFixture(t, func(context.Context, *queue.Message) error { return nil }, single)
	p, err := f.raw.Sibling(context.Background(), "work-poison")
	if err != nil {
		t.Fatal(err)
	}
	o.Poison = p
	o.Clock = f.clock
	l, err := listener.NewBatch(f.q, bh, o)
	if err != nil {
		t.Fatal(err)
	}
	f.l = l
	return f, p
}

// One call gets more than one get can return: it fills from several gets
// up to BatchMax.
func TestBatchCallFillsFromSeveralGets(t *testing.T) {
	c := &calls{}
	f, _ := newBatchFixture(t, c.handle, listener.Options{BatchMax: 100, BatchWait: time.Hour})
	f.put(100)
	f.start()
	eventually(t, "all 100 deleted", func() bool { return f.l.Stats().Deleted == 100 })
	if s := c.sizes(); !slices.Equal(s, []int{100}) {
		t.Fatalf("calls of %v messages, want one of 100 (gets return at most %d)", s, queue.MaxBatchSize)
	}
	if st := f.l.Stats(); st.Calls != 1 || st.Processed != 100 {
		t.Fatalf("stats: %d calls, %d processed; want 1 and 100", st.Calls, st.Processed)
	}
}

// A partial batch waits BatchWait (by the listener's clock) for more, then
// runs with what it has.
func TestBatchPartialCallWaitsThenRuns(t *testing.T) {
	c := &calls{}
	f, _ := newBatchFixture(t, c.handle, listener.Options{BatchMax: 100, BatchWait: 200 * time.Millisecond})
	f.put(10)
	f.start()
	eventually(t, "the 10 are fetched", func() bool { return f.l.LocalState().InFlight == 10 })
	eventually(t, "the task paces or sleeps", func() bool {
		return f.l.PacingTasks()+f.l.LocalState().IdleTasks > 0
	})
	if s := c.sizes(); len(s) != 0 {
		t.Fatalf("calls %v before the wait ended", s)
	}
	f.clock.Advance(200 * time.Millisecond)
	eventually(t, "all 10 deleted", func() bool { return f.l.Stats().Deleted == 10 })
	if s := c.sizes(); !slices.Equal(s, []int{10}) {
		t.Fatalf("calls of %v, want one of 10", s)
	}
}

type hinted struct{ d time.Duration }

func (h hinted) Error() string             { return "throttled" }
func (h hinted) RetryAfter() time.Duration { return h.d }

// Each message's outcome is its own: nil deletes it, an error sends it
// alone down the failure path (hidden for a Retry-After hint, poisoned
// when permanent, left to reappear otherwise).
func TestBatchOutcomesArePerMessage(t *testing.T) {
	c := &calls{outcome: func(m *queue.Message) error {
		switch string(m.Body) {
		case "m3":
			return errors.New("row refused")
		case "m5":
			return handler.Permanent(errors.New("bad row"))
		case "m7":
			return hinted{time.Minute}
		}
		return nil
	}}
	f, pq := newBatchFixture(t, c.handle, listener.Options{BatchMax: 10})
	f.put(10)
	f.start()
	eventually(t, "7 deleted, 1 poisoned, 1 hidden", func() bool {
		st := f.l.Stats()
		return st.Deleted == 7 && st.Poisoned == 1 && st.Hidden == 1 && st.Failed == 3
	})
	if n, _ := pq.Count(context.Background()); n != 1 {
		t.Fatalf("poison queue holds %d, want 1", n)
	}
	if d := f.depth(); d != 2 {
		t.Fatalf("queue holds %d, want 2 (m3 and m7)", d)
	}
	if st := f.l.Stats(); st.Processed != 7 || st.Calls != 1 {
		t.Fatalf("%d processed in %d calls; want 7 in 1", st.Processed, st.Calls)
	}
}

// A panic fails every message of the call, and none is deleted.
func TestBatchPanicFailsTheWholeCall(t *testing.T) {
	var n atomic.Int32
	f, _ := newBatchFixture(t, func(ctx context.Context, ms []*queue.Message) []error {
		n.Add(1)
		panic("bulk insert exploded")
	}, listener.Options{BatchMax: 8})
	f.put(8)
	f.start()
	eventually(t, "8 failed", func() bool { return f.l.Stats().Failed == 8 })
	if st := f.l.Stats(); st.Panics != 8 || st.Deleted != 0 || st.Processed != 0 {
		t.Fatalf("stats %+v: want 8 panics, nothing deleted", st)
	}
	if d := f.depth(); d != 8 {
		t.Fatalf("queue holds %d, want 8", d)
	}
}

// A wrong number of results fails every message of the call.
func TestBatchWrongResultCountFailsAll(t *testing.T) {
	f, _ := newBatchFixture(t, func(ctx context.Context, ms []*queue.Message) []error {
		return []error{nil}
	}, listener.Options{BatchMax: 4})
	f.put(4)
	f.start()
	eventually(t, "4 failed", func() bool { return f.l.Stats().Failed == 4 })
	if st := f.l.Stats(); st.Deleted != 0 {
		t.Fatalf("%d deleted, want 0", st.Deleted)
	}
}

// Messages waiting for their call to fill are handed back at once when
// the listener stops; the handler never sees them.
func TestBatchDrainReleasesWaitingMessages(t *testing.T) {
	c := &calls{}
	f, _ := newBatchFixture(t, c.handle, listener.Options{BatchMax: 100, BatchWait: time.Hour})
	f.put(5)
	f.start()
	eventually(t, "the 5 are fetched", func() bool { return f.l.LocalState().InFlight == 5 })
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	if s := c.sizes(); len(s) != 0 {
		t.Fatalf("calls %v, want none", s)
	}
	if st := f.l.Stats(); st.Released != 5 {
		t.Fatalf("released %d, want 5", st.Released)
	}
	ms, err := f.raw.Get(context.Background(), 32, time.Second)
	if err != nil || len(ms) != 5 {
		t.Fatalf("got %d (%v) after the stop, want all 5 visible at once", len(ms), err)
	}
}

// Messages waiting for their call to fill longer than half their
// visibility timeout are renewed, so the call that finally runs deletes
// them with receipts that are still good, and nobody else got them.
func TestBatchRenewsWaitingMessages(t *testing.T) {
	c := &calls{}
	const vis = 30 * time.Second
	f, _ := newBatchFixture(t, c.handle, listener.Options{BatchMax: 100, BatchWait: time.Minute, VisibilityTimeout: vis})
	f.put(5)
	f.start()
	eventually(t, "the 5 are fetched, and the task paces or sleeps", func() bool {
		return f.l.LocalState().InFlight == 5 && f.l.PacingTasks()+f.l.LocalState().IdleTasks > 0
	})
	// Past half the visibility timeout: the waiting messages are renewed.
	f.walk(vis/2 + time.Second)
	eventually(t, "the 5 are renewed", func() bool { return f.l.Stats().Renewed == 5 })
	if s := c.sizes(); len(s) != 0 {
		t.Fatalf("calls %v before the wait ended", s)
	}
	// Past the first lease: the messages are still held by this listener.
	f.walk(vis / 2)
	if ms, err := f.raw.Get(context.Background(), 32, time.Second); err != nil || len(ms) != 0 {
		t.Fatalf("another consumer got %d (%v) of the waiting messages", len(ms), err)
	}
	f.walk(time.Minute)
	eventually(t, "5 deleted", func() bool { return f.l.Stats().Deleted == 5 })
	st := f.l.Stats()
	if st.ReceiptMismatches != 0 || st.LeasesLost != 0 {
		t.Fatalf("stats %+v: want the 5 renewed, no stale receipt, no lost lease", st)
	}
	if s := c.sizes(); !slices.Equal(s, []int{5}) {
		t.Fatalf("calls %v, want one of 5", s)
	}
}

// Concurrency counts calls, not messages; and the messages held while
// calls run stay bounded.
func TestBatchConcurrencyCountsCalls(t *testing.T) {
	c := &calls{gate: make(chan struct{})}
	f, _ := newBatchFixture(t, c.handle, listener.Options{BatchMax: 5, Concurrency: 2})
	f.put(40)
	f.start()
	eventually(t, "2 calls run", func() bool { return c.running.Load() == 2 })
	if held := f.l.LocalState().InFlight; held > 3*5 {
		t.Fatalf("%d messages held with 2 calls of 5 running, want at most 15", held)
	}
	close(c.gate)
	eventually(t, "all 40 deleted", func() bool { return f.l.Stats().Deleted == 40 })
	if m := c.most.Load(); m != 2 {
		t.Fatalf("at most %d calls ran at once, want 2", m)
	}
	for _, s := range c.sizes() {
		if s > 5 {
			t.Fatalf("a call of %d, above BatchMax 5", s)
		}
	}
}

func TestBatchOptionsAreValidated(t *testing.T) {
	f := newFixture(t, func(context.Context, *queue.Message) error { return nil }, listener.Options{})
	bh := func(context.Context, []*queue.Message) []error { return nil }
	for _, tc := range []struct {
		o    listener.Options
		want string
	}{
		{listener.Options{BatchMax: -1}, "batch_handler.max: -1"},
		{listener.Options{BatchMax: listener.MaxBatchMax + 1}, fmt.Sprintf("batch_handler.max: %d", listener.MaxBatchMax+1)},
		{listener.Options{BatchWait: -time.Second}, "batch_handler.wait: -1s"},
		{listener.Options{Adaptive: &scaling.AIMDOptions{Min: 1, Max: 4}}, "concurrency: an adaptive concurrency (auto) is not supported"},
	} {
		_, err := listener.NewBatch(f.q, bh, tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %q", tc.o, err, tc.want)
		}
	}
	if _, err := listener.NewBatch(f.q, nil, listener.Options{}); err == nil {
		t.Error("a nil batch handler was accepted")
	}
	l, err := listener.NewBatch(f.q, bh, listener.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if o := l.Options(); o.BatchMax != listener.DefaultBatchMax || o.Concurrency != listener.DefaultBatchConcurrency {
		t.Errorf("defaults: max %d, concurrency %d", o.BatchMax, o.Concurrency)
	}
}

// walk moves the fake clock on by d a second at a time, letting what each
// step set off run first, as time passing would.
func (f *fixture) walk(d time.Duration) {
	f.t.Helper()
	for ; d > 0; d -= time.Second {
		f.clock.Advance(min(d, time.Second))
		eventually(f.t, "the clock's work is done", func() bool {
			return f.clock.Running() == 0 && f.clock.Unreceived() == 0
		})
	}
}

// Messages waiting for a call to fill wait for the clock: the test kit's
// activity hook counts them held, and their batch not busy.
func TestBatchWaitingMessagesCountAsHeld(t *testing.T) {
	c := &calls{}
	f, _ := newBatchFixture(t, c.handle, listener.Options{BatchMax: 100, BatchWait: time.Minute})
	f.put(40)
	f.start()
	eventually(t, "the 40 are fetched, and the task paces or sleeps", func() bool {
		return f.l.LocalState().InFlight == 40 && f.l.PacingTasks()+f.l.LocalState().IdleTasks > 0
	})
	if _, busy, held := kithook.Activity(f.l); held != 40 || busy != 0 {
		t.Fatalf("activity: %d busy, %d held; want 0 and 40", busy, held)
	}
	f.walk(time.Minute)
	eventually(t, "40 deleted", func() bool { return f.l.Stats().Deleted == 40 })
	if _, busy, held := kithook.Activity(f.l); held != 0 || busy != 0 {
		t.Fatalf("activity after the call: %d busy, %d held; want 0 and 0", busy, held)
	}
}

// A call that fails as a whole (a panic) is one line of the failure log,
// with its size, besides its messages' lines.
func TestBatchCallFailureIsLoggedOnce(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	f, _ := newBatchFixture(t, func(ctx context.Context, ms []*queue.Message) []error {
		panic("bulk insert exploded")
	}, listener.Options{BatchMax: 8, MaxDequeueCount: 100, Logger: zap.New(core), FailureLogLines: -1})
	f.put(8)
	f.start()
	eventually(t, "8 failed", func() bool { return f.l.Stats().Failed == 8 })
	eventually(t, "the call's line", func() bool {
		return logs.FilterMessage("listener: batch handler call failed as a whole; each of its messages fails").Len() == 1
	})
	e := logs.FilterMessage("listener: batch handler call failed as a whole; each of its messages fails").All()[0]
	if e.ContextMap()["call_size"] != int64(8) || e.ContextMap()["stack"] == nil {
		t.Errorf("the call's line has %v, want call_size 8 and the stack", e.ContextMap())
	}
}

// A JSONBatch call whose first body does not decode and whose func then
// panics failed as a whole: its line is written though the first result
// is the decode error, not the panic.
func TestBatchCallFailureIsLoggedWhenTheFirstBodyFailsToDecode(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	f, _ := newBatchFixture(t, handler.JSONBatch(func(context.Context, []struct{ N int }) []error {
		panic("bulk insert exploded")
	}), listener.Options{BatchMax: 8, MaxDequeueCount: 100, Logger: zap.New(core), FailureLogLines: -1})
	ctx := context.Background()
	if _, err := f.raw.Put(ctx, []byte("not json"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 7; i++ {
		if _, err := f.raw.Put(ctx, fmt.Appendf(nil, `{"N":%d}`, i), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.start()
	eventually(t, "8 failed", func() bool { return f.l.Stats().Failed >= 8 })
	eventually(t, "the call's line", func() bool {
		return logs.FilterMessage("listener: batch handler call failed as a whole; each of its messages fails").Len() >= 1
	})
	e := logs.FilterMessage("listener: batch handler call failed as a whole; each of its messages fails").All()[0]
	if e.ContextMap()["stack"] == nil {
		t.Errorf("the call's line has %v, want the stack", e.ContextMap())
	}
}

// loseLease refuses the renewals of one message, as if another consumer
// had taken it.
type loseLease struct {
	driver.Queue
	id atomic.Pointer[string]
}

func (q *loseLease) UpdateVisibility(ctx context.Context, id, receipt string, d time.Duration) (string, error) {
	if p := q.id.Load(); p != nil && *p == id && d > 0 {
		return "", driver.ErrReceiptMismatch
	}
	return q.Queue.UpdateVisibility(ctx, id, receipt, d)
}

// A call cancelled because one of its messages lost its lease fails the
// others through no fault of theirs: they are handed back at once and the
// run does not count towards their poisoning.
func TestBatchLeaseLostCancelsTheCallWithoutBlamingTheOthers(t *testing.T) {
	ll := &loseLease{}
	var cancelled atomic.Int32
	bh := func(ctx context.Context, ms []*queue.Message) []error {
		<-ctx.Done()
		cancelled.Add(1)
		return handler.FailAll(len(ms), ctx.Err())
	}
	const vis = 10 * time.Second
	o := listener.Options{BatchMax: 3, BatchWait: time.Hour, VisibilityTimeout: vis, MaxDequeueCount: 1}
	f := newFixtureWith(t, func(context.Context, *queue.Message) error { return nil }, listener.Options{VisibilityTimeout: vis, MaxDequeueCount: 1},
		func(d driver.Queue) driver.Queue { ll.Queue = d; return ll })
	p, err := f.raw.Sibling(context.Background(), "work-poison")
	if err != nil {
		t.Fatal(err)
	}
	o.Poison, o.Clock = p, f.clock
	if f.l, err = listener.NewBatch(f.q, bh, o); err != nil {
		t.Fatal(err)
	}
	ids := f.put(3)
	ll.id.Store(&ids[0])
	f.start()
	eventually(t, "the call runs", func() bool { return f.l.LocalState().InFlight == 3 && f.clock.Pending() > 0 })
	f.walk(vis/2 + time.Second)
	eventually(t, "the call was cancelled and settled", func() bool {
		st := f.l.Stats()
		return cancelled.Load() == 1 && st.Released+st.Poisoned+st.Hidden >= 2
	})
	st := f.l.Stats()
	if st.LeasesLost != 1 || st.Poisoned != 0 || st.Released != 2 {
		t.Fatalf("stats %+v: want 1 lease lost, nothing poisoned, the other 2 handed back", st)
	}
	if n, _ := p.Count(context.Background()); n != 0 {
		t.Fatalf("the poison queue holds %d", n)
	}
}
