package listener_test

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/adaptq/adaptq/queue"
)

// The queue wrappers of the issue-11 tests live in this one file: they are
// the listener's view of a queue with faults and latency injected.

// heldGets counts gets on their way and holds each until release is
// closed; the get then reaches the backend.
type heldGets struct {
	queue.Queue
	inside  atomic.Int32
	release chan struct{}
}

func (h *heldGets) Get(ctx context.Context, n int, vis time.Duration) ([]*queue.Message, error) {
	h.inside.Add(1)
	<-h.release
	return h.Queue.Get(ctx, n, vis)
}

// heldDeletes signals each delete on entered and holds it until release
// is closed: a delete with a long latency.
type heldDeletes struct {
	queue.Queue
	entered chan struct{}
	release chan struct{}
}

func (h *heldDeletes) Delete(ctx context.Context, id, receipt string) error {
	h.entered <- struct{}{}
	<-h.release
	return h.Queue.Delete(ctx, id, receipt)
}
