package queuetest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"golang.org/x/sync/errgroup"
)

const (
	concurrentConsumers = 8
	concurrentMessages  = 5000
)

func (e *env) concurrencyMessages() int {
	if e.h.ConcurrencyMessages > 0 {
		return e.h.ConcurrencyMessages
	}
	return concurrentMessages
}

// fill puts n messages with 8 producers and returns their ids.
func (e *env) fill(t *testing.T, q *queue.Queue, n int) map[string]bool {
	t.Helper()
	var mu sync.Mutex
	ids := make(map[string]bool, n)
	var next atomic.Int64
	g, ctx := errgroup.WithContext(e.ctx)
	for p := 0; p < 8; p++ {
		g.Go(func() error {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return nil
				}
				id, err := q.Put(ctx, []byte(fmt.Sprintf("msg-%d", i)), queue.PutOptions{})
				if err != nil {
					return fmt.Errorf("put %d: %w", i, err)
				}
				mu.Lock()
				ids[id] = true
				mu.Unlock()
			}
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if len(ids) != n {
		t.Fatalf("%d puts returned %d distinct ids", n, len(ids))
	}
	return ids
}

// holdings records every hold (who got which message, from when until
// when, by the backend's own clock) and checks afterwards that no two holds
// of one message overlap: no two consumers inside one visibility window.
type holdings struct {
	mu    sync.Mutex
	holds map[string][]hold
	slack time.Duration
}

type hold struct {
	consumer  int
	from, end time.Time
}

func newHoldings(slack time.Duration) *holdings {
	return &holdings{holds: map[string][]hold{}, slack: slack}
}

// got records that consumer c got m with visibility vis. The get happened
// at m.NextVisibleAt-vis by the backend's clock.
func (h *holdings) got(c int, m *queue.Message, vis time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holds[m.ID] = append(h.holds[m.ID], hold{consumer: c, from: m.NextVisibleAt.Add(-vis), end: m.NextVisibleAt})
}

// overlaps lists every pair of overlapping holds.
func (h *holdings) overlaps() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var bad []string
	for id, hs := range h.holds {
		sort.Slice(hs, func(i, j int) bool { return hs[i].from.Before(hs[j].from) })
		for i := 1; i < len(hs); i++ {
			if hs[i].from.Add(h.slack).Before(hs[i-1].end) {
				bad = append(bad, fmt.Sprintf("message %s: consumer %d got it at %s while consumer %d held it until %s",
					id, hs[i].consumer, hs[i].from.Format(time.RFC3339Nano), hs[i-1].consumer, hs[i-1].end.Format(time.RFC3339Nano)))
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// retryDelete retries a delete that failed with err while the failures are
// transient; a retry that finds the message gone means an earlier attempt
// deleted it, whose answer was lost.
func retryDelete(ctx context.Context, q *queue.Queue, r queue.Receipt, err error) error {
	for tries := 1; err != nil && queue.IsTransient(err) && tries <= 10; tries++ {
		time.Sleep(time.Duration(tries) * 50 * time.Millisecond)
		err = q.Delete(ctx, r.ID, r.PopReceipt)
		if errors.Is(err, queue.ErrNotFound) {
			return nil
		}
	}
	return err
}

func testConcurrentConsumers(t *testing.T, e *env) {
	q := e.open(t, "concurrent")
	n := e.concurrencyMessages()
	ids := e.fill(t, q, n)
	// The visibility timeout outlasts the drain, so every message must be got
	// exactly once.
	const vis = 10 * time.Minute
	h := newHoldings(e.f.TimeResolution)
	var deleted atomic.Int64
	// The drain is bounded in operations: each Get that returns messages
	// takes at least one of the n, and each consumer ends on its first
	// empty Get, so a correct drain needs at most n + consumers Gets; a
	// transient failure (a busy server resetting a connection) may cost
	// one more each, at most n in all. A drain past that is not
	// progressing, and fails saying so instead of looping.
	maxGets, maxTransient := int64(n+concurrentConsumers), int64(n)
	var gets, transient atomic.Int64
	gctx, cancel := e.guard(t)
	defer cancel()
	g, ctx := errgroup.WithContext(gctx)
	for c := 0; c < concurrentConsumers; c++ {
		g.Go(func() error {
			for {
				if k := gets.Add(1); k > maxGets {
					return fmt.Errorf("consumer %d: %d Gets made, the most a drain of %d messages by %d consumers needs", c, k-1, n, concurrentConsumers)
				}
				ms, err := q.Get(ctx, e.batch(), vis)
				if err != nil {
					if queue.IsTransient(err) && ctx.Err() == nil {
						if k := transient.Add(1); k > maxTransient {
							return fmt.Errorf("consumer %d get: %d transient failures, more than one per message: %w", c, k, err)
						}
						gets.Add(-1) // the failure's own budget paid for it
						continue
					}
					return fmt.Errorf("consumer %d get: %w", c, err)
				}
				if len(ms) == 0 {
					return nil
				}
				rs := make([]queue.Receipt, len(ms))
				for i, m := range ms {
					h.got(c, m, vis)
					rs[i] = queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt}
				}
				res, err := q.DeleteBatch(ctx, rs)
				if err != nil && !queue.IsTransient(err) {
					return fmt.Errorf("consumer %d delete batch: %w", c, err)
				}
				for i, r := range rs {
					var rerr error = err
					if err == nil {
						rerr = res[i]
					}
					if rerr != nil {
						// A transient failure (a busy server resets a
						// connection): delete again with the same receipt, as a
						// consumer does; NotFound then means the first went
						// through.
						if rerr = retryDelete(ctx, q, r, rerr); rerr != nil {
							return fmt.Errorf("consumer %d delete %s: %w", c, r.ID, rerr)
						}
					}
					deleted.Add(1)
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		h.mu.Lock()
		got := len(h.holds)
		h.mu.Unlock()
		t.Fatalf("the drain stopped after %d Gets (%d transient failures), %d of %d messages got and %d deleted: %v",
			min(gets.Load(), maxGets), transient.Load(), got, n, deleted.Load(), err)
	}
	for _, b := range h.overlaps() {
		t.Error(b)
	}
	for id, hs := range h.holds {
		if !ids[id] {
			t.Errorf("got unknown id %s", id)
		}
		if len(hs) != 1 {
			t.Errorf("message %s got %d times inside one visibility window", id, len(hs))
		}
	}
	if len(h.holds) != n || deleted.Load() != int64(n) {
		t.Fatalf("consumers got %d distinct and deleted %d of %d messages", len(h.holds), deleted.Load(), n)
	}
	if c := e.count(t, q); c != 0 {
		t.Fatalf("Count after the drain = %d", c)
	}
}

// guard is e.ctx ended a little before the test's deadline (go test
// -timeout), so that a case whose backend has stalled fails naming what
// it had done instead of the binary panicking with every goroutine's
// stack. It is a hang guard only: no case asserts how long anything takes.
func (e *env) guard(t *testing.T) (context.Context, context.CancelFunc) {
	return guard(t, e.ctx)
}

func guard(t *testing.T, ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := t.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	margin := min(time.Until(dl)/10, 30*time.Second)
	return context.WithDeadline(ctx, dl.Add(-margin))
}

// testConcurrentWithTimeouts drains with consumers that drop a share of the
// messages they get (as a crashed worker would): those come back after the
// visibility timeout, and still no two consumers hold a message at once.
func testConcurrentWithTimeouts(t *testing.T, e *env) {
	if !e.virtual() {
		t.Skip("needs an injected clock: the timeouts would take minutes of real time")
	}
	q := e.open(t, "concurrent-timeouts")
	n := e.concurrencyMessages() / 5
	ids := e.fill(t, q, n)
	const vis = 5 * time.Second
	h := newHoldings(0)
	var deleted atomic.Int64
	var dropped atomic.Int64
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	// The clock runs while consumers work, so windows end mid-drain.
	tick := make(chan struct{})
	go func() {
		defer close(tick)
		for ctx.Err() == nil {
			e.h.Advance(time.Second)
			time.Sleep(50 * time.Microsecond)
		}
	}()
	g, gctx := errgroup.WithContext(ctx)
	for c := 0; c < concurrentConsumers; c++ {
		g.Go(func() error {
			k := 0
			for deleted.Load() < int64(n) {
				ms, err := q.Get(gctx, min(8, e.batch()), vis)
				if err != nil {
					return fmt.Errorf("consumer %d get: %w", c, err)
				}
				for _, m := range ms {
					h.got(c, m, vis)
					k++
					if k%7 == 0 && m.DequeueCount < 3 {
						dropped.Add(1) // "crash": never delete it
						continue
					}
					switch err := q.Delete(gctx, m.ID, m.PopReceipt); {
					case err == nil:
						deleted.Add(1)
					case errorsIsAny(err, queue.ErrReceiptMismatch, queue.ErrNotFound):
						// It timed out and someone else has it now: expected.
					default:
						return fmt.Errorf("consumer %d delete: %w", c, err)
					}
				}
			}
			return nil
		})
	}
	err := g.Wait()
	cancel()
	<-tick
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range h.overlaps() {
		t.Error(b)
	}
	if len(h.holds) != n {
		t.Fatalf("got %d distinct of %d messages", len(h.holds), n)
	}
	for id := range h.holds {
		if !ids[id] {
			t.Errorf("got unknown id %s", id)
		}
	}
	if dropped.Load() == 0 {
		t.Fatal("no message was dropped: the case did not test redelivery")
	}
	if c := e.count(t, q); c != 0 {
		t.Fatalf("Count after the drain = %d", c)
	}
}

func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
