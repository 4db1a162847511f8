package listener

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
)

// The pool's slice of waiting messages keeps no reference past its
// length: a stale ref there would keep a finished get's batch, and every
// body of it, alive for as long as the pool stays short (up to its
// capacity, (Concurrency+1)·BatchMax refs, each to a batch of up to 32
// messages).
func TestPoolKeepsNoStaleRefs(t *testing.T) {
	c := clock.NewFake(clock.Epoch)
	store := memory.NewStore(memory.WithClock(c))
	q, err := store.Queue("work")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		if _, err := q.Put(context.Background(), fmt.Append(nil, i), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	gate := make(chan struct{})
	l, err := NewBatch(q, func(ctx context.Context, ms []*queue.Message) []error {
		<-gate
		return nil
	}, Options{BatchMax: 4, BatchWait: time.Hour, Concurrency: 1, BatchSize: 3, Tasks: 1, Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := l.Start(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p := l.pool
	waiting := func() (n, running int) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.waiting), p.running
	}
	// Gets of 3: the second fills a call of 4 and leaves 2 waiting.
	waitFor(t, "a call of 4 runs and 2 wait", func() bool { n, r := waiting(); return r == 1 && n == 2 })
	p.mu.Lock()
	// The tail past the 2 now waiting held the refs the call took.
	for k, r := range p.waiting[len(p.waiting):cap(p.waiting)] {
		if r.b != nil {
			p.mu.Unlock()
			t.Fatalf("waiting[%d] past the length still refers to a batch", len(p.waiting)+k)
		}
	}
	p.mu.Unlock()
	close(gate)
	cancel()
	done := make(chan error, 1)
	go func() { done <- l.Wait() }()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return
		case <-time.After(time.Millisecond):
			c.AdvanceToNext() // the shutdown grace
		}
	}
}
