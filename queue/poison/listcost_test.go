package poison_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/poison"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
	"github.com/adaptq/adaptq/queue/sqlite"
)

// calls counts a queue's backend calls by operation, as the cost meter
// sees them (rejected calls are not billed and not counted).
type calls struct {
	mu sync.Mutex
	n  map[queue.Op]int
}

func (c *calls) Observe(call queue.Call) {
	if call.Rejected {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[call.Op]++
}

func (c *calls) take() map[queue.Op]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[queue.Op]int{}
	return n
}

func total(n map[queue.Op]int) int {
	t := 0
	for _, v := range n {
		t += v
	}
	return t
}

// Issue 26, item 3: each GET of a listing scanned the whole poison queue
// whatever its limit (a page of 10 from 1,000 messages: 32 gets and 1,000
// visibility updates, each raising a dequeue count). A page now costs
// backend calls bounded by its size, independent of what the poison queue
// holds, and peeks only: no message is hidden or counted.
func TestListCostIsBoundedByThePageNotTheQueue(t *testing.T) {
	t.Parallel()
	open := map[string]func(t *testing.T, o queue.Option) *queue.Queue{
		"memory": func(t *testing.T, o queue.Option) *queue.Queue {
			q, err := memory.NewStore().Queue("orders-poison", o)
			if err != nil {
				t.Fatal(err)
			}
			return q
		},
		"sqlite": func(t *testing.T, o queue.Option) *queue.Queue {
			db, err := sqlite.Open(filepath.Join(t.TempDir(), "q.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			q, err := db.Queue("orders-poison", o)
			if err != nil {
				t.Fatal(err)
			}
			return q
		},
		"postgres": func(t *testing.T, o queue.Option) *queue.Queue {
			db, err := postgres.Open(context.Background(), pgtest.URL(t), postgres.WithSchema(pgtest.Schema(t)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			q, err := db.Queue(context.Background(), "orders-poison", o)
			if err != nil {
				t.Fatal(err)
			}
			return q
		},
	}
	for name, o := range open {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c := &calls{n: map[queue.Op]int{}}
			pq := o(t, queue.WithObserver(c))
			const n = 1000
			poisonN(t, pq, n)
			c.take()

			p, err := poison.List(ctx, pq, "", 10)
			if err != nil {
				t.Fatal(err)
			}
			got := c.take()
			if len(p.Messages) != 10 || p.Next == "" {
				t.Fatalf("a page of 10 from %d: %d messages, next %q", n, len(p.Messages), p.Next)
			}
			if total(got) > 2 || got[queue.OpGet] != 0 || got[queue.OpUpdate] != 0 {
				t.Errorf("a page of 10 from %d messages cost %d backend calls %v, want at most 2 peeks", n, total(got), got)
			}
			// The next pages cost the same, and follow on.
			seen := map[string]bool{}
			for _, m := range p.Messages {
				seen[m.PoisonID] = true
			}
			for range 5 {
				if p, err = poison.List(ctx, pq, p.Next, 10); err != nil {
					t.Fatal(err)
				}
				for _, m := range p.Messages {
					if seen[m.PoisonID] {
						t.Fatalf("message %s on two pages", m.PoisonID)
					}
					seen[m.PoisonID] = true
				}
			}
			if got := c.take(); total(got) > 10 || got[queue.OpGet] != 0 || got[queue.OpUpdate] != 0 || len(seen) != 60 {
				t.Errorf("5 more pages of 10: %d calls %v, %d messages seen; want at most 10 peeks, 60 messages", total(got), got, len(seen))
			}
			// Nothing was got: every message's dequeue count is still 0.
			ms, err := pq.Peek(ctx, pq.Features().MaxPeek)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range ms {
				if m.DequeueCount != 0 {
					t.Fatalf("message %s has dequeue count %d after listings", m.ID, m.DequeueCount)
				}
			}
			if len(ms) != pq.Features().MaxPeek {
				t.Fatalf("peek shows %d messages", len(ms))
			}
		})
	}
}
