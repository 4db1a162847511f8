package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/meter"
)

// noBatch is a driver without batch deletes (as Azure's), whose Deletes
// block until n of them are in flight at once.
type noBatch struct {
	driver.Queue
	n       int
	mu      sync.Mutex
	waiting int
	open    chan struct{}
}

func (b *noBatch) Features() driver.Features {
	f := b.Queue.Features()
	f.BatchDelete = false
	return f
}

func (b *noBatch) Delete(ctx context.Context, id, r string) error {
	b.mu.Lock()
	b.waiting++
	if b.waiting == b.n {
		close(b.open)
	}
	b.mu.Unlock()
	select {
	case <-b.open:
	case <-time.After(10 * time.Second):
		return errors.New("deletes ran one after another")
	}
	return b.Queue.Delete(ctx, id, r)
}

// fill puts n messages and gets them back.
func fill(t *testing.T, q *queue.Queue, n int) []queue.Receipt {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		if _, err := q.Put(ctx, []byte(fmt.Sprint(i)), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var rs []queue.Receipt
	for len(rs) < n {
		ms, err := q.Get(ctx, q.Features().MaxBatch, time.Minute)
		if err != nil || len(ms) == 0 {
			t.Fatal(len(rs), err)
		}
		for _, m := range ms {
			rs = append(rs, queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
		}
	}
	return rs
}

func TestDeleteBatchWithoutTheCapabilityDeletesConcurrentlyAndInOrderForRepeats(t *testing.T) {
	b := &noBatch{n: 8, open: make(chan struct{})}
	m := meter.New(0)
	q, err := memory.NewStore().Queue("delete-each", queue.WithObserver(m),
		queue.WithWrapper(func(d driver.Queue) driver.Queue { b.Queue = d; return b }))
	if err != nil {
		t.Fatal(err)
	}
	rs := fill(t, q, 8)
	res, err := q.DeleteBatch(context.Background(), append(rs, rs[2]))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		if res[i] != nil {
			t.Fatalf("delete %d: %v", i, res[i])
		}
	}
	if !errors.Is(res[8], queue.ErrNotFound) {
		t.Fatalf("the repeated id: %v, want ErrNotFound as a sequential delete gives", res[8])
	}
	if s := m.Snapshot(); s.Calls[meter.Delete] != 9 || s.Calls[meter.DeleteBatch] != 0 {
		t.Fatalf("billed %d deletes and %d batch deletes, want 9 and 0", s.Calls[meter.Delete], s.Calls[meter.DeleteBatch])
	}
}

// tracing is a user's wrapper: it sees every get and forwards the rest by
// embedding.
type tracing struct {
	driver.Queue
	gets int
}

func (t *tracing) Get(ctx context.Context, n int, vis time.Duration) ([]*driver.Message, error) {
	t.gets++
	return t.Queue.Get(ctx, n, vis)
}

func TestAWrapperKeepsBatchDeletes(t *testing.T) {
	tr := &tracing{}
	m := meter.New(0)
	q, err := memory.NewStore().Queue("wrapped", queue.WithObserver(m),
		queue.WithWrapper(func(d driver.Queue) driver.Queue { tr.Queue = d; return tr }))
	if err != nil {
		t.Fatal(err)
	}
	rs := fill(t, q, 20)
	if _, err := q.DeleteBatch(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
	s := m.Snapshot()
	if s.Calls[meter.DeleteBatch] != 1 || s.Calls[meter.Delete] != 0 || s.MessagesDeleted != 20 {
		t.Fatalf("through a wrapper: %d batch deletes, %d deletes, %d deleted; want 1, 0, 20",
			s.Calls[meter.DeleteBatch], s.Calls[meter.Delete], s.MessagesDeleted)
	}
	if tr.gets == 0 {
		t.Fatal("the wrapper saw no get")
	}
	if !q.Features().BatchDelete {
		t.Fatal("the wrapper hid the batch-delete capability")
	}
}

func TestArgumentsAreCheckedAgainstTheDriversLimits(t *testing.T) {
	ctx := context.Background()
	m := meter.New(0)
	q, err := memory.NewStore(memory.WithMaxBatch(10), memory.WithMaxBodySize(100)).Queue("limits", queue.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	_, err = q.Get(ctx, 11, time.Minute)
	if !errors.Is(err, queue.ErrBatchSize) || !strings.Contains(err.Error(), "11") || !strings.Contains(err.Error(), "1..10") {
		t.Fatalf("Get(11) on a driver of 10: %v", err)
	}
	if !strings.HasPrefix(err.Error(), `memory: get "limits": `) {
		t.Errorf("error %q does not name the driver, operation and queue", err)
	}
	_, err = q.Put(ctx, make([]byte, 101), queue.PutOptions{})
	if !errors.Is(err, queue.ErrTooLarge) || !strings.Contains(err.Error(), "101") {
		t.Fatalf("Put of 101 bytes on a limit of 100: %v", err)
	}
	if _, err := q.UpdateVisibility(ctx, "1", "x", -time.Second); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("UpdateVisibility(-1s): %v", err)
	}
	if s := m.Snapshot(); s.Total() != 0 || s.Rejected != 3 {
		t.Fatalf("rejected calls reached the backend: %d billed, %d rejected; want 0, 3", s.Total(), s.Rejected)
	}
}

func TestClosedQueueRefusesEveryCall(t *testing.T) {
	ctx := context.Background()
	q, _ := memory.NewStore().Queue("closed")
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	calls := map[string]error{}
	_, calls["put"] = q.Put(ctx, []byte("x"), queue.PutOptions{})
	_, calls["get"] = q.Get(ctx, 1, time.Minute)
	calls["delete"] = q.Delete(ctx, "1", "r")
	_, calls["delete batch"] = q.DeleteBatch(ctx, []queue.Receipt{{ID: "1", PopReceipt: "r"}})
	_, calls["update visibility"] = q.UpdateVisibility(ctx, "1", "r", 0)
	_, calls["peek"] = q.Peek(ctx, 1)
	_, calls["count"] = q.Count(ctx)
	calls["clear"] = q.Clear(ctx)
	_, calls["sibling"] = q.Sibling(ctx, "other")
	_, calls["subscribe"] = q.Subscribe(ctx)
	for op, err := range calls {
		if !errors.Is(err, queue.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", op, err)
		}
	}
	if err := q.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

func TestErrorsKeepTheDriversClassification(t *testing.T) {
	ctx := context.Background()
	busy := errors.New("server busy")
	q, _ := memory.NewStore().Queue("classified", queue.WithWrapper(func(d driver.Queue) driver.Queue {
		return &classifying{Queue: d, err: busy}
	}))
	_, err := q.Get(ctx, 1, time.Minute)
	if !errors.Is(err, busy) {
		t.Fatalf("Get: %v, want the driver's error", err)
	}
	if !queue.IsTransient(err) {
		t.Error("the driver classified the error transient; the queue lost that")
	}
	if d, ok := queue.RetryAfter(err); !ok || d != 7*time.Second {
		t.Errorf("RetryAfter = %v, %v; want the driver's 7s", d, ok)
	}
	// A cancelled context is the caller's choice, never transient.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := q.Get(cctx, 1, time.Minute); !errors.Is(err, context.Canceled) || queue.IsTransient(err) {
		t.Errorf("Get with a cancelled context: %v (transient %v)", err, queue.IsTransient(err))
	}
	var store *memory.Store
	if !q.As(&store) || store == nil {
		t.Error("As did not give the memory driver's store")
	}
	var wrong *strings.Builder
	if q.As(&wrong) {
		t.Error("As filled a target of the wrong type")
	}
}

// classifying fails gets with err and classifies it transient, retry in 7s.
type classifying struct {
	driver.Queue
	err error
}

func (c *classifying) Get(context.Context, int, time.Duration) ([]*driver.Message, error) {
	return nil, c.err
}

func (c *classifying) Classify(err error) (bool, time.Duration) {
	if errors.Is(err, c.err) {
		return true, 7 * time.Second
	}
	return c.Queue.Classify(err)
}

func TestUnsupportedOperations(t *testing.T) {
	ctx := context.Background()
	q, _ := memory.NewStore().Queue("bare", queue.WithWrapper(func(d driver.Queue) driver.Queue { return bare{d} }))
	if _, err := q.Peek(ctx, 1); !errors.Is(err, queue.ErrUnsupported) {
		t.Errorf("Peek without the capability: %v", err)
	}
	if _, err := q.Sibling(ctx, "other"); !errors.Is(err, queue.ErrUnsupported) {
		t.Errorf("Sibling without the capability: %v", err)
	}
	if _, err := q.Subscribe(ctx); !errors.Is(err, queue.ErrUnsupported) {
		t.Errorf("Subscribe without the capability: %v", err)
	}
	if _, err := q.Sibling(ctx, "Bad_Name"); !errors.Is(err, queue.ErrInvalidName) {
		t.Errorf("Sibling with a bad name: %v", err)
	}
}

// bare is a driver that says it has no optional capability.
type bare struct{ driver.Queue }

func (b bare) Features() driver.Features {
	f := b.Queue.Features()
	f.MaxPeek, f.Siblings, f.NativeNotify, f.BatchDelete = 0, false, false, false
	return f
}

// longPoller stands in for a backend with long polling and billing by
// payload (SQS): it records the wait each Get was given.
type longPoller struct {
	driver.Queue
	waits []time.Duration
}

func (l *longPoller) Features() driver.Features {
	f := l.Queue.Features()
	f.LongPoll = 20 * time.Second
	f.BillingChunk = 64 << 10
	return f
}

func (l *longPoller) Get(ctx context.Context, n int, vis time.Duration) ([]*driver.Message, error) {
	l.waits = append(l.waits, driver.Wait(ctx))
	return l.Queue.Get(ctx, n, vis)
}

// GetWait hands the driver a wait cut to its LongPoll, Get none; a driver
// without LongPoll never sees one. Bodies are billed by BillingChunk.
func TestGetWaitAndBillingByPayload(t *testing.T) {
	ctx := context.Background()
	lp := &longPoller{}
	m := meter.New(0)
	q, err := memory.NewStore(memory.WithMaxBodySize(1<<20)).Queue("long-poll", queue.WithObserver(m),
		queue.WithWrapper(func(d driver.Queue) driver.Queue { lp.Queue = d; return lp }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Get(ctx, 1, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := q.GetWait(ctx, 1, time.Second, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := q.GetWait(ctx, 1, time.Second, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{0, 20 * time.Second, 5 * time.Second}
	if fmt.Sprint(lp.waits) != fmt.Sprint(want) {
		t.Fatalf("the driver got waits %v, want %v", lp.waits, want)
	}
	// 200 KiB put and got: 4 requests each (64 KiB chunks), 2 calls.
	body := make([]byte, 200<<10)
	before := m.Snapshot()
	if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if ms, err := q.Get(ctx, 1, time.Second); err != nil || len(ms) != 1 {
		t.Fatalf("Get = %d, %v", len(ms), err)
	}
	d := m.Snapshot().Sub(before)
	if d.Total() != 2 || d.Billed() != 8 {
		t.Fatalf("a 200 KiB put and get: %d calls, %d billed requests; want 2 and 8", d.Total(), d.Billed())
	}

	plain, _ := memory.NewStore().Queue("plain")
	if _, err := plain.GetWait(ctx, 1, time.Second, time.Minute); err != nil {
		t.Fatalf("GetWait without long polling: %v", err)
	}
}

// Without the driver's batch capability, UpdateVisibilityBatch makes one
// UpdateVisibility per receipt, each billed, each with its own result.
func TestUpdateVisibilityBatchFallsBackToOneCallEach(t *testing.T) {
	ctx := context.Background()
	m := meter.New(0)
	q, err := memory.NewStore().Queue("release-batch", queue.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	rs := fill(t, q, 5)
	rs = append(rs, queue.Receipt{ID: "nope", PopReceipt: "nope"})
	before := m.Snapshot()
	nr, res, err := q.UpdateVisibilityBatch(ctx, rs, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if res[i] != nil || nr[i] == "" {
			t.Fatalf("result %d: %q, %v", i, nr[i], res[i])
		}
	}
	if !errors.Is(res[5], queue.ErrNotFound) {
		t.Fatalf("an unknown message: %v, want ErrNotFound", res[5])
	}
	if d := m.Snapshot().Sub(before); d.Calls[meter.Update] != 6 {
		t.Fatalf("%d update calls, want 6", d.Calls[meter.Update])
	}
	if ms, err := q.Get(ctx, 10, time.Second); err != nil || len(ms) != 5 {
		t.Fatalf("after the release Get = %d, %v; want 5", len(ms), err)
	}
	if _, _, err := q.UpdateVisibilityBatch(ctx, rs, -time.Second); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("a negative visibility: %v", err)
	}
}
