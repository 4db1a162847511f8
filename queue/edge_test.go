package queue_test

// Review of 33691ec (issue 12): tests that fail on the change as committed.

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
)

// countingPuts is a user wrapper (tracing, fault injection) that embeds the
// driver it wraps, as the CHANGELOG and WithWrapper's doc tell users to do.
type countingPuts struct {
	driver.Queue
	puts *atomic.Int64
}

func (c countingPuts) Put(ctx context.Context, b []byte, o driver.PutOptions) (string, error) {
	c.puts.Add(1)
	return c.Queue.Put(ctx, b, o)
}

// WithWrapper says "Siblings are wrapped the same way", and Sibling sets
// o.wrappers = nil because "d came from the wrapped driver: wrapped
// already". But an embedding wrapper forwards Sibling to the inner driver,
// which returns an unwrapped sibling: the poison queue silently loses the
// user's tracing / fault injection.
func TestSiblingOfAWrappedQueueIsWrapped(t *testing.T) {
	ctx := context.Background()
	var puts atomic.Int64
	q, err := memory.NewStore().Queue("work", queue.WithWrapper(func(d driver.Queue) driver.Queue {
		return countingPuts{Queue: d, puts: &puts}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := q.Sibling(ctx, "work-poison")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Put(ctx, []byte("y"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := puts.Load(); got != 2 {
		t.Fatalf("the wrapper saw %d puts, want 2: the sibling is not wrapped", got)
	}
}

// perItem is a driver whose batch delete fails one receipt with an error
// that only its own Classify knows is transient (as a PostgreSQL driver
// would classify a serialization failure, 40001).
type perItem struct {
	driver.Queue
	err error
}

func (p perItem) DeleteBatch(ctx context.Context, rs []driver.Receipt) ([]error, error) {
	res, err := p.Queue.DeleteBatch(ctx, rs)
	if err == nil && len(res) > 0 {
		res[0] = p.err
	}
	return res, err
}

func (p perItem) Delete(context.Context, string, string) error { return p.err }

func (p perItem) Classify(err error) (bool, time.Duration) {
	if errors.Is(err, p.err) {
		return true, 3 * time.Second
	}
	return p.Queue.Classify(err)
}

// DeleteBatch's per-receipt errors go through q.wrap, i.e.
// driver.DefaultClassify, not the driver's Classify: the same error is
// transient from Delete and permanent from DeleteBatch, so the listener
// gives up on it (deleteErrors, the message runs again) instead of retrying.
func TestPerReceiptErrorsKeepTheDriversClassification(t *testing.T) {
	ctx := context.Background()
	serialization := errors.New("could not serialize access (40001)")
	q, err := memory.NewStore().Queue("per-item", queue.WithWrapper(func(d driver.Queue) driver.Queue {
		return perItem{Queue: d, err: serialization}
	}))
	if err != nil {
		t.Fatal(err)
	}
	rs := fill(t, q, 3)
	if err := q.Delete(ctx, rs[0].ID, rs[0].PopReceipt); !queue.IsTransient(err) {
		t.Fatalf("Delete: %v is not transient; the driver says it is", err)
	}
	res, err := q.DeleteBatch(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[0], serialization) {
		t.Fatalf("result 0 = %v", res[0])
	}
	if !queue.IsTransient(res[0]) {
		t.Errorf("DeleteBatch result %v: not transient, but the driver's Classify says transient", res[0])
	}
	if d, ok := queue.RetryAfter(res[0]); !ok || d != 3*time.Second {
		t.Errorf("DeleteBatch result RetryAfter = %v, %v; want the driver's 3s", d, ok)
	}
}

// liveCtx records whether a driver's DeleteBatch was entered with a context
// that had already ended, and ends the caller's context during its first
// call (the caller gave up midway).
type liveCtx struct {
	driver.Queue
	cancel func()
	calls  int
	dead   int
}

func (l *liveCtx) DeleteBatch(ctx context.Context, rs []driver.Receipt) ([]error, error) {
	l.calls++
	if ctx.Err() != nil {
		l.dead++
	}
	l.cancel()
	return l.Queue.DeleteBatch(ctx, rs)
}

// The driver package promises a driver "a context that was live when the
// call began". DeleteBatch checks ctx once, then calls the driver for every
// chunk, the later ones with the ended context; the remaining chunks should
// be refused as a whole (or reported with the context's error) without
// calling the driver.
func TestDeleteBatchChunksAfterCancelDoNotReachTheDriver(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := &liveCtx{cancel: cancel}
	q, err := memory.NewStore(memory.WithMaxBatch(4)).Queue("chunks", queue.WithWrapper(func(d driver.Queue) driver.Queue {
		l.Queue = d
		return l
	}))
	if err != nil {
		t.Fatal(err)
	}
	rs := fill(t, q, 12)
	res, _ := q.DeleteBatch(ctx, rs)
	if l.dead > 0 {
		t.Errorf("the driver's DeleteBatch was entered %d of %d times with an ended context (results %v)", l.dead, l.calls, res)
	}
}

// IsTransient's doc: "A cancelled or expired context of the caller is not
// transient: the caller gave up." An expired one is: DefaultClassify takes
// context.DeadlineExceeded for a net.Error timeout.
func TestExpiredContextIsNotTransient(t *testing.T) {
	q, _ := memory.NewStore().Queue("expired")
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err := q.Get(ctx, 1, time.Minute)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get with an expired context: %v", err)
	}
	if queue.IsTransient(err) {
		t.Errorf("%v is reported transient", err)
	}
}

// sloppy returns nil entries and, when asked for 1, two messages.
type sloppy struct{ driver.Queue }

func (s sloppy) Get(ctx context.Context, n int, vis time.Duration) ([]*driver.Message, error) {
	ms, err := s.Queue.Get(ctx, max(n, 2), vis)
	if err != nil || n > 1 {
		return append([]*driver.Message{nil}, ms...)[:min(len(ms)+1, n)], err
	}
	return ms, err
}

func TestDriverOutputIsChecked(t *testing.T) {
	ctx := context.Background()
	q, _ := memory.NewStore().Queue("sloppy", queue.WithWrapper(func(d driver.Queue) driver.Queue { return sloppy{d} }))
	for i := 0; i < 5; i++ {
		if _, err := q.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := q.Get(ctx, 3, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m == nil {
			t.Fatal("a nil message reached the caller")
		}
	}
	if len(ms) != 2 {
		t.Fatalf("got %d messages, want the 2 real ones", len(ms))
	}
	if _, err := q.Get(ctx, 1, time.Minute); err == nil || !strings.Contains(err.Error(), "2 messages for a request of 1") {
		t.Fatalf("a driver answering 2 to a get of 1: %v, want an error", err)
	}
}
