package poison_test

import (
	"context"
	"testing"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/poison"
)

// cancelAfterPut cancels the requeue's context as soon as a put succeeded:
// the caller went away (a closed HTTP request, Ctrl-C) in between.
type cancelAfterPut struct {
	driver.Queue
	cancel context.CancelFunc
}

func (q cancelAfterPut) Put(ctx context.Context, body []byte, o driver.PutOptions) (string, error) {
	id, err := q.Queue.Put(ctx, body, o)
	q.cancel()
	return id, err
}

// A requeue whose context ends after a message was put back still deletes
// it from the poison queue: the put is done, and leaving the poison copy
// would run the message twice once it is requeued again.
func TestRequeueCancelledAfterThePutLeavesNoDuplicate(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := memory.NewStore()
	home, err := s.Queue("orders", queue.WithWrapper(func(d driver.Queue) driver.Queue { return cancelAfterPut{d, cancel} }))
	if err != nil {
		t.Fatal(err)
	}
	pq, err := s.Queue("orders-poison")
	if err != nil {
		t.Fatal(err)
	}
	m := sample([]byte("pay once"))
	m.ID = "orig-1"
	if _, err := pq.Put(context.Background(), mustEncode(t, m), queue.PutOptions{TTL: queue.NoExpiry}); err != nil {
		t.Fatal(err)
	}
	res, _ := poison.Requeue(ctx, pq, onlyOrders(home), poison.Selection{All: true})
	if got := drain(t, home); len(got) != 1 || got[0] != "pay once" {
		t.Fatalf("orders holds %q, want the body once", got)
	}
	if got := drain(t, pq); len(got) != 0 {
		t.Fatalf("the poison queue still holds %d after the body was put back (result %+v): a duplicate", len(got), res)
	}
}
