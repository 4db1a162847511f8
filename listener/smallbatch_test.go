package listener_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
)

// largestGet records the largest n any Get asked for.
type largestGet struct {
	driver.Queue
	mu  sync.Mutex
	max int
}

func (g *largestGet) Get(ctx context.Context, n int, vis time.Duration) ([]*driver.Message, error) {
	g.mu.Lock()
	g.max = max(g.max, n)
	g.mu.Unlock()
	return g.Queue.Get(ctx, n, vis)
}

// A backend whose gets return at most 10 (SQS) works with the default
// options: the listener asks for 10, never for more, and drains the queue.
func TestDefaultOptionsFitADriverWithASmallerBatch(t *testing.T) {
	g := &largestGet{}
	q, err := memory.NewStore(memory.WithMaxBatch(10)).Queue("small-batch",
		queue.WithWrapper(func(d driver.Queue) driver.Queue { g.Queue = d; return g }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const n = 250
	for i := 0; i < n; i++ {
		if _, err := q.Put(ctx, []byte(fmt.Sprint(i)), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rec := newRecorder()
	l, err := listener.New(q, rec.handle, listener.Options{})
	if err != nil {
		t.Fatalf("default options on a driver of 10: %v", err)
	}
	if o := l.Options(); o.BatchSize != 10 || o.NewBatchThreshold != 5 {
		t.Fatalf("batch %d, threshold %d; want 10 and 5", o.BatchSize, o.NewBatchThreshold)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(runCtx) }()
	eventually(t, "every message is deleted", func() bool { return l.Stats().Deleted == n })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if rec.distinct() != n {
		t.Fatalf("handled %d distinct of %d", rec.distinct(), n)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.max != 10 {
		t.Fatalf("the largest get asked for %d, want 10", g.max)
	}
	// A batch size set above the driver's limit is lowered too, and a
	// threshold set below it is kept.
	l2, err := listener.New(q, rec.handle, listener.Options{BatchSize: 32, NewBatchThreshold: 4})
	if err != nil {
		t.Fatal(err)
	}
	if o := l2.Options(); o.BatchSize != 10 || o.NewBatchThreshold != 4 {
		t.Fatalf("batch %d, threshold %d; want 10 and 4", o.BatchSize, o.NewBatchThreshold)
	}
}
