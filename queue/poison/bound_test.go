package poison_test

import (
	"context"
	"testing"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/poison"
)

// One requeue or purge of everything acts on at most MaxScan messages and
// then says more remain, as the README promises: the cost of one call (one
// admin request) is bounded, whatever the poison queue holds. A second
// call does the rest.
func TestRequeueAndPurgeOfMoreThanMaxScanStopAndSayRunItAgain(t *testing.T) {
	t.Parallel()
	const extra = 2000
	ctx := context.Background()
	for _, op := range []string{"requeue", "purge"} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			s := memory.NewStore()
			home, err := s.Queue("orders")
			if err != nil {
				t.Fatal(err)
			}
			pq, err := s.Queue("orders-poison")
			if err != nil {
				t.Fatal(err)
			}
			body, err := poison.Encode(sample([]byte("b")), 0)
			if err != nil {
				t.Fatal(err)
			}
			for range poison.MaxScan + extra {
				if _, err := pq.Put(ctx, body, queue.PutOptions{TTL: queue.NoExpiry}); err != nil {
					t.Fatal(err)
				}
			}
			do := func() poison.Result {
				var res poison.Result
				var err error
				if op == "requeue" {
					res, err = poison.Requeue(ctx, pq, onlyOrders(home), poison.Selection{All: true})
				} else {
					res, err = poison.Purge(ctx, pq, poison.Selection{All: true})
				}
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			first := do()
			if len(first.Done) != poison.MaxScan || !first.More {
				t.Fatalf("first %s of %d: %d done, more %v; want %d done and more", op, poison.MaxScan+extra, len(first.Done), first.More, poison.MaxScan)
			}
			second := do()
			if len(second.Done) != extra || second.More {
				t.Fatalf("second %s: %d done, more %v; want %d done and no more", op, len(second.Done), second.More, extra)
			}
			if n, _ := pq.Count(ctx); n != 0 {
				t.Fatalf("the poison queue still holds %d", n)
			}
		})
	}
}
