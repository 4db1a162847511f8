package poison_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/poison"
)

// bombs puts n compressed envelopes to a memory poison queue, each of a
// body of size zeros (the envelope is a few KiB: DEFLATE packs zeros about
// 1000 to 1), and one small message last; it returns the queue and the
// last message's poison id.
func bombs(t *testing.T, n, size int) (*queue.Queue, string) {
	t.Helper()
	ctx := context.Background()
	pq, err := memory.NewStore().Queue("orders-poison")
	if err != nil {
		t.Fatal(err)
	}
	zeros := make([]byte, size)
	for i := range n {
		b, err := poison.Encode(poison.Message{ID: fmt.Sprint("bomb-", i), Queue: "orders", DequeueCount: 5,
			FailedAt: time.Now(), InsertedAt: time.Now(), Body: zeros}, pq.Features().MaxBody)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pq.Put(ctx, b, queue.PutOptions{TTL: queue.NoExpiry}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := poison.Encode(poison.Message{ID: "small", Queue: "orders", DequeueCount: 5,
		FailedAt: time.Now(), InsertedAt: time.Now(), Body: []byte("hello")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	id, err := pq.Put(ctx, b, queue.PutOptions{TTL: queue.NoExpiry})
	if err != nil {
		t.Fatal(err)
	}
	return pq, id
}

// allocated is how many bytes f allocated (the whole process's; the test
// is not parallel, so parallel tests are paused meanwhile).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A compressed envelope inflates to what its header says, up to 64 MiB
// (maxInflated): 16 MiB of zeros are a 22 KiB envelope, which a poison
// queue of 64 KiB takes, whether the listener wrote it (a source queue
// that takes large bodies) or a producer that can write to the poison
// queue did. Finding one message, showing a page of previews or purging
// one message must not inflate every other message it passes.
func TestToolsDoNotInflateTheMessagesTheyPass(t *testing.T) {
	const n, size, bound = 12, 16 << 20, 48 << 20 // 192 MiB if each is inflated
	pq, last := bombs(t, n, size)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		f    func() error
	}{
		{"Find by poison id", func() error { _, err := poison.Find(ctx, pq, last); return err }},
		{"Find by original id", func() error { _, err := poison.Find(ctx, pq, "small"); return err }},
		{"Find of an id not there", func() error {
			if _, err := poison.Find(ctx, pq, "absent"); err == nil {
				return fmt.Errorf("found")
			}
			return nil
		}},
		{"ListBodies", func() error { _, err := poison.ListBodies(ctx, pq, "", 50); return err }},
		{"PeekBodies", func() error { _, err := poison.PeekBodies(ctx, pq, 32); return err }},
		{"Purge one by id", func() error {
			res, err := poison.Purge(ctx, pq, poison.Selection{IDs: []string{"small"}})
			if err == nil && len(res.Done) != 1 {
				err = fmt.Errorf("purged %+v", res)
			}
			return err
		}},
	} {
		var err error
		a := allocated(func() { err = c.f() })
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if a > bound {
			t.Errorf("%s allocated %d MiB for %d messages of %d KiB each (bodies of %d MiB); want at most %d MiB",
				c.name, a>>20, n+1, 22, size>>20, bound>>20)
		}
	}
}

// Two queues that share a poison queue may each poison a message with the
// same original id and body (ids are unique per backend, not across the
// backends or stores of a worker's queues; a poison queue written by
// another program holds what it likes). A requeue of all must put each back
// to its own queue: the second is not a duplicate of the first.
func TestRequeueDoesNotTakeAnotherQueuesMessageForADuplicate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := memory.NewStore()
	pq, err := s.Queue("shared-poison")
	if err != nil {
		t.Fatal(err)
	}
	homes := map[string]*queue.Queue{}
	for _, name := range []string{"orders", "billing"} {
		if homes[name], err = s.Queue(name); err != nil {
			t.Fatal(err)
		}
		b, err := poison.Encode(poison.Message{ID: "7", Queue: name, DequeueCount: 5,
			FailedAt: time.Now(), InsertedAt: time.Now(), Body: []byte("charge 10")}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pq.Put(ctx, b, queue.PutOptions{TTL: queue.NoExpiry}); err != nil {
			t.Fatal(err)
		}
	}
	dest := func(name string) (*queue.Queue, error) { return homes[name], nil }
	res, err := poison.Requeue(ctx, pq, dest, poison.Selection{All: true})
	if err != nil {
		t.Fatal(err)
	}
	for name, q := range homes {
		if n, err := q.Count(ctx); err != nil || n != 1 {
			t.Errorf("queue %s holds %d messages (%v) after the requeue, want 1; result %+v", name, n, err, res)
		}
	}
	if n, err := pq.Count(ctx); err != nil || n != 0 {
		t.Errorf("the poison queue holds %d (%v), want 0", n, err)
	}
}

// peekOnly is a driver that peeks but cannot page its peeks, as Azure's
// and Redis's (a wrapper that embeds the driver hides driver.PeekPager).
type peekOnly struct{ driver.Queue }

// Issue 26 item 3 bounded a listing's cost by its page, because anyone
// who may read the admin endpoint can repeat a GET. GET
// /v1/queues/NAME/poison/ID (Find) is such a GET: on a backend that cannot
// page its peeks, an id not among the first 32 made it get every message of
// the poison queue (up to 10,000), hide it, raise its dequeue count and
// hand it back, about 10,300 billed calls on Azure, for any id.
func TestFindCostIsBoundedOnABackendThatOnlyPeeks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := &calls{n: map[queue.Op]int{}}
	pq, err := memory.NewStore().Queue("orders-poison", queue.WithObserver(c),
		queue.WithWrapper(func(d driver.Queue) driver.Queue { return peekOnly{d} }))
	if err != nil {
		t.Fatal(err)
	}
	if pq.PeekPages() {
		t.Fatal("the wrapper did not hide PeekPager")
	}
	const n = 500
	poisonN(t, pq, n)
	c.take()
	if _, err := poison.Find(ctx, pq, "no-such-id"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Find of an absent id: %v, want ErrNotFound", err)
	}
	if got := c.take(); got[queue.OpGet] != 0 || got[queue.OpUpdate] != 0 || total(got) > 1 {
		t.Errorf("Find of an absent id in %d messages cost %d backend calls %v; want one peek, nothing hidden", n, total(got), got)
	}
}

// A requeue puts a body back only if its queue takes it: an envelope whose
// header says the body is larger than the queue's limit is refused from
// its header, without inflating it (up to 64 MiB each, for every message a
// requeue of all passes).
func TestRequeueRefusesABodyTooLargeForItsQueueWithoutInflatingIt(t *testing.T) {
	const n, size = 4, 16 << 20
	pq, _ := bombs(t, n, size)
	home, err := memory.NewStore().Queue("orders")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var res poison.Result
	a := allocated(func() {
		res, err = poison.Requeue(ctx, pq, func(string) (*queue.Queue, error) { return home, nil }, poison.Selection{All: true})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Done) != 1 || len(res.Failed) != n {
		t.Fatalf("requeue: %+v; want the small one back and the %d large ones failed", res, n)
	}
	if a > 16<<20 {
		t.Errorf("a requeue refusing %d bodies of %d MiB for a queue of %d KiB allocated %d MiB; want at most 16 MiB",
			n, size>>20, home.MaxBodySize()>>10, a>>20)
	}
}
