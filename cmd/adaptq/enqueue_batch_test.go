package main

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/meter"
)

// TestEnqueuePutsInBatches: enqueue --count 100 (and --lines) puts with
// PutBatch: 4 backend calls of up to 32 on a batching driver, no single
// puts, every message stored.
func TestEnqueuePutsInBatches(t *testing.T) {
	t.Parallel()
	m := meter.New(0)
	q, err := memory.NewStore().Queue("orders", queue.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	var done atomic.Int64
	out, err := putAll(context.Background(), q, [][]byte{[]byte("a"), []byte("b"), []byte("c")}, 100, queue.PutOptions{}, &done, new(atomic.Bool))
	if err != nil || out.firstID == "" || done.Load() != 100 || out.written != 100 {
		t.Fatalf("putAll = %+v, %v; %d done", out, err, done.Load())
	}
	s := m.Snapshot()
	if s.Calls[meter.PutBatch] != 4 || s.Calls[meter.Put] != 0 || s.MessagesPut != 100 {
		t.Fatalf("meter: %v, %d put; want 4 batch calls for 100 messages", s.Map(), s.MessagesPut)
	}
	if n, _ := q.Count(context.Background()); n != 100 {
		t.Fatalf("Count = %d, want 100", n)
	}
}
