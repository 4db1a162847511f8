package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
)

// writesThenCancelled is a driver whose batch put, once the caller's
// context is cancelled, stores the batch and returns the context's error:
// a network backend whose reply is lost to the cancel after the write.
type writesThenCancelled struct {
	driver.Queue
	pb       driver.PutBatcher
	inFlight chan struct{}
}

func (w *writesThenCancelled) PutBatch(ctx context.Context, reqs []driver.PutRequest) ([]string, []error, error) {
	close(w.inFlight)
	<-ctx.Done()
	if _, _, err := w.pb.PutBatch(context.Background(), reqs); err != nil {
		return nil, nil, err
	}
	return nil, nil, ctx.Err()
}

// TestEnqueueCancelledNeverCallsStoredMessagesUnwritten: when the run is
// cancelled (the caller's context) during a batch, the batch fails with
// the context's error though the backend may have stored it. The report
// said "4 not written" of four messages the queue holds; it must not say
// a message was not written when its put was not refused.
func TestEnqueueCancelledNeverCallsStoredMessagesUnwritten(t *testing.T) {
	t.Parallel()
	store := memory.NewStore(memory.WithMaxBatch(4))
	w := &writesThenCancelled{inFlight: make(chan struct{})}
	q, err := store.Queue("orders", queue.WithWrapper(func(d driver.Queue) driver.Queue {
		w.Queue, w.pb = d, d.(driver.PutBatcher)
		return w
	}))
	if err != nil {
		t.Fatal(err)
	}
	var bodies [][]byte
	for i := range 4 {
		bodies = append(bodies, []byte(fmt.Sprintf("m%d", i)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-w.inFlight; cancel() }()
	var done atomic.Int64
	out, err := putAll(ctx, q, bodies, 4, queue.PutOptions{}, &done, new(atomic.Bool))
	if err == nil {
		t.Fatal("putAll of a cancelled run: no error")
	}
	n, cerr := q.Count(context.Background())
	if cerr != nil {
		t.Fatal(cerr)
	}
	if n != 4 {
		t.Fatalf("the queue holds %d, want 4 (the driver stores the batch)", n)
	}
	for _, msg := range []string{out.describe(), err.Error()} {
		if strings.Contains(msg, "not written") {
			t.Errorf("report %q says messages were not written; the queue holds all %d", msg, n)
		}
	}
}
