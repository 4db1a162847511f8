package sqs_test

import (
	"errors"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/queue/sqs"
	"github.com/adaptq/adaptq/queue/sqs/sqstest"
)

// Client.Close's doc: "queues opened on it then return queue.ErrClosed".
// Every call of a queue opened on a closed client fails with ErrClosed
// before it reaches SQS (the meter bills none of them), and a receipt got
// before the close still names a message that the next client can delete.
func TestClosedClientClosesItsQueues(t *testing.T) {
	t.Parallel()
	srv := sqstest.Shared(t)
	region := sqstest.NewRegion()
	c := newClient(t, srv, sqs.Config{Region: region})
	m := meter.New(0)
	q := openQueue(t, c, "closed-client", queue.WithObserver(m))
	if _, err := q.Put(ctx, []byte("before"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	held := getOne(t, q)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	before := m.Snapshot()
	calls := map[string]error{}
	_, calls["Put"] = q.Put(ctx, []byte("after"), queue.PutOptions{})
	_, calls["Get"] = q.Get(ctx, 1, time.Minute)
	calls["Delete"] = q.Delete(ctx, held.ID, held.PopReceipt)
	rs := []queue.Receipt{{ID: held.ID, PopReceipt: held.PopReceipt}}
	// A batch's driver error is its receipts' results.
	res, err := q.DeleteBatch(ctx, rs)
	calls["DeleteBatch"] = firstErr(res, err)
	_, calls["UpdateVisibility"] = q.UpdateVisibility(ctx, held.ID, held.PopReceipt, 0)
	_, res, err = q.UpdateVisibilityBatch(ctx, rs, 0)
	calls["UpdateVisibilityBatch"] = firstErr(res, err)
	_, calls["Count"] = q.Count(ctx)
	_, calls["Depth"] = q.Depth(ctx)
	calls["Clear"] = q.Clear(ctx)
	_, calls["Sibling"] = q.Sibling(ctx, "closed-client-poison")
	for op, err := range calls {
		if !errors.Is(err, queue.ErrClosed) {
			t.Errorf("%s after Client.Close: %v, want ErrClosed", op, err)
		}
	}
	if d := m.Snapshot().Sub(before); d.Total() != 0 {
		t.Errorf("calls after Client.Close were billed: %v", d.Map())
	}
	if err := c.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	// Nothing was lost: the held message is still there for a new client.
	again := openQueue(t, newClient(t, srv, sqs.Config{Region: region}), "closed-client")
	if err := again.Delete(ctx, held.ID, held.PopReceipt); err != nil {
		t.Fatalf("the held message, deleted through a new client: %v", err)
	}
	if n, err := again.Count(ctx); err != nil || n != 0 {
		t.Fatalf("Count = %d, %v after deleting the only message", n, err)
	}
}

// firstErr is a batch call's error, or its first result's.
func firstErr(results []error, err error) error {
	if err != nil || len(results) == 0 {
		return err
	}
	return results[0]
}
