package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
)

// TestIDsStayUniqueAfterARestartFromASnapshot: the test's own redis-server
// takes a snapshot, more messages are put and handled, and the server is
// killed and restarted from the snapshot (what a crash without AOF, or a
// failover to a replica that lags, does). The messages of the snapshot are
// back; the ids put after the restart are new, not those of the messages
// handled after the snapshot, which an idempotent handler keyed on the id
// would drop as duplicates.
func TestIDsStayUniqueAfterARestartFromASnapshot(t *testing.T) {
	s := startServer(t)
	prefix := testPrefix()
	url := s.URL("ids", prefix, "")
	ctx := context.Background()
	seen := map[string]string{}
	putSome := func(q *queue.Queue, when string, n int) []string {
		t.Helper()
		var out []string
		for range n {
			id := mustPut(t, q, when, queue.PutOptions{})
			if first, dup := seen[id]; dup {
				t.Fatalf("id %s put %s repeats one put %s", id, when, first)
			}
			seen[id] = when
			out = append(out, id)
		}
		return out
	}

	q, err := queue.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	putSome(q, "before the snapshot", 5)
	s.Save()
	putSome(q, "after the snapshot", 5)
	// Handle everything: the ids after the snapshot are done with.
	for {
		ms, err := q.Get(ctx, 32, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			if err := q.Delete(ctx, m.ID, m.PopReceipt); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}

	s.Restart()
	q, err = queue.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if n, err := q.Count(ctx); err != nil || n != 5 {
		t.Fatalf("after the restart Count = %d, %v: want the snapshot's 5 messages", n, err)
	}
	putSome(q, "after the restart", 10)
}
