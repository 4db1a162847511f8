package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
)

var errBoom = errors.New("boom")

// racingBatches is a driver whose batch put fails the batch that starts
// with body "m4" once the batch that starts with "m0" is in flight; the
// "m0" batch, if its context can end, waits for that and then stores its
// messages and returns the context's error, as a network backend does
// when its reply is lost to a cancel after the write.
type racingBatches struct {
	driver.Queue
	pb       driver.PutBatcher
	inFlight chan struct{}
}

func (r *racingBatches) PutBatch(ctx context.Context, reqs []driver.PutRequest) ([]string, []error, error) {
	switch string(reqs[0].Body) {
	case "m0":
		close(r.inFlight)
		if ctx.Done() != nil {
			<-ctx.Done()
		}
		ids, res, err := r.pb.PutBatch(context.Background(), reqs)
		if err == nil && ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return ids, res, err
	case "m4":
		<-r.inFlight
		return nil, nil, errBoom
	}
	return r.pb.PutBatch(ctx, reqs)
}

// TestEnqueueReportsWhatWasWritten: a batch that fails does not cancel the
// batches already in flight; the count enqueue reports is what the backend
// holds, and the error names the failed batch.
func TestEnqueueReportsWhatWasWritten(t *testing.T) {
	t.Parallel()
	store := memory.NewStore(memory.WithMaxBatch(4))
	wrap := func(d driver.Queue) driver.Queue {
		return &racingBatches{Queue: d, pb: d.(driver.PutBatcher), inFlight: make(chan struct{})}
	}
	q, err := store.Queue("orders", queue.WithWrapper(wrap))
	if err != nil {
		t.Fatal(err)
	}
	var bodies [][]byte
	for i := range 8 {
		bodies = append(bodies, []byte(fmt.Sprintf("m%d", i)))
	}
	var done atomic.Int64
	out, err := putAll(context.Background(), q, bodies, 8, queue.PutOptions{}, &done, new(atomic.Bool))
	if !errors.Is(err, errBoom) {
		t.Fatalf("putAll error %v, want the failed batch's", err)
	}
	n, cerr := q.Count(context.Background())
	if cerr != nil {
		t.Fatal(cerr)
	}
	if out.written != n || int(done.Load()) != n || n != 4 {
		t.Fatalf("putAll reports %d written (progress %d), the queue holds %d; want 4 (the batch in flight when the other failed)", out.written, done.Load(), n)
	}
	if msg := out.describe(); !strings.Contains(msg, "messages 4 to 7") || !strings.Contains(msg, "boom") {
		t.Fatalf("describe() = %q; want the failed batch (messages 4 to 7) and its error", msg)
	}
}
