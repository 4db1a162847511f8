package poison_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/poison"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
	"github.com/adaptq/adaptq/queue/sqlite"
)

// backends runs f against a queue "orders" and its poison queue on each
// embedded backend and on the machine's PostgreSQL (skipped without one):
// the tools use only the portable API, so they must behave the same on
// all.
func backends(t *testing.T, f func(t *testing.T, home, pq *queue.Queue)) {
	t.Helper()
	// Each opener returns how to open a queue of a fresh instance.
	open := map[string]func(t *testing.T) func(name string) (*queue.Queue, error){
		"memory": func(*testing.T) func(string) (*queue.Queue, error) {
			s := memory.NewStore()
			return func(name string) (*queue.Queue, error) { return s.Queue(name) }
		},
		"sqlite": func(t *testing.T) func(string) (*queue.Queue, error) {
			db, err := sqlite.Open(filepath.Join(t.TempDir(), "q.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			return func(name string) (*queue.Queue, error) { return db.Queue(name) }
		},
		"postgres": func(t *testing.T) func(string) (*queue.Queue, error) {
			db, err := postgres.Open(context.Background(), pgtest.URL(t), postgres.WithSchema(pgtest.Schema(t)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			return func(name string) (*queue.Queue, error) { return db.Queue(context.Background(), name) }
		},
	}
	for name, o := range open {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			q := o(t)
			home, err := q("orders")
			if err != nil {
				t.Fatal(err)
			}
			pq, err := q("orders-poison")
			if err != nil {
				t.Fatal(err)
			}
			f(t, home, pq)
		})
	}
}

// poisonN puts n poison messages to pq: enveloped ones with original ids
// orig-0 … and bodies body-0 …, every fifth one bare (an old version's).
// It returns their poison ids in order.
func poisonN(t *testing.T, pq *queue.Queue, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		body := fmt.Appendf(nil, "body-%d", i)
		if i%5 != 4 {
			m := sample(body)
			m.ID = fmt.Sprintf("orig-%d", i)
			var err error
			if body, err = poison.Encode(m, pq.MaxBodySize()); err != nil {
				t.Fatal(err)
			}
		}
		id, err := pq.Put(context.Background(), body, queue.PutOptions{TTL: queue.NoExpiry})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// drain gets every visible message of q and returns their bodies (hidden
// for an hour: a second drain finds none).
func drain(t *testing.T, q *queue.Queue) []string {
	t.Helper()
	var out []string
	for {
		ms, err := q.Get(context.Background(), q.Features().MaxBatch, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			return out
		}
		for _, m := range ms {
			out = append(out, string(m.Body))
		}
	}
}

func TestListPagesBeyondAPeekEachMessageOnceAndLeavesThemVisible(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, _, pq *queue.Queue) {
		ctx := context.Background()
		const n = 75
		want := poisonN(t, pq, n)
		var got []string
		pages, after := 0, ""
		for {
			p, err := poison.List(ctx, pq, after, 20)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, m := range p.Messages {
				got = append(got, m.PoisonID)
				if m.Body != nil || m.Size == 0 {
					t.Errorf("listed message %s: body %q, size %d (a listing carries sizes, not bodies)", m.PoisonID, m.Body, m.Size)
				}
				if wantEnv := m.ID != ""; m.Enveloped != wantEnv || (m.Enveloped && (m.Reason == "" || m.DequeueCount != 5)) {
					t.Errorf("listed message %+v: metadata missing", m)
				}
			}
			if p.Truncated {
				t.Error("a listing of 75 says it is truncated")
			}
			if p.Next == "" {
				break
			}
			after = p.Next
			if pages > n {
				t.Fatal("the listing does not end")
			}
		}
		if pages != 4 {
			t.Errorf("%d pages of 20 for %d messages, want 4", pages, n)
		}
		if gs, ws := slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want)); !slices.Equal(gs, ws) {
			t.Errorf("listed %d ids %v, want each of the %d once: %v", len(got), got, n, want)
		}
		// Read-only in effect: all of them are still there, visible now.
		if bodies := drain(t, pq); len(bodies) != n {
			t.Errorf("after the listing %d messages are visible, want %d", len(bodies), n)
		}
	})
}

func TestListOfAFewMessagesPeeksAndPagesStayStable(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, _, pq *queue.Queue) {
		ctx := context.Background()
		want := poisonN(t, pq, 7)
		first, err := poison.List(ctx, pq, "", 3)
		if err != nil {
			t.Fatal(err)
		}
		rest, err := poison.List(ctx, pq, first.Next, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range append(first.Messages, rest.Messages...) {
			got = append(got, m.PoisonID)
		}
		if len(first.Messages) != 3 || rest.Next != "" || !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
			t.Errorf("pages %d + %d (next %q): %v, want %v", len(first.Messages), len(rest.Messages), rest.Next, got, want)
		}
		// Peeking changed nothing: the messages were never got.
		ms, err := pq.Peek(ctx, 32)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.DequeueCount != 0 {
				t.Errorf("message %s has dequeue count %d after a listing of a few", m.ID, m.DequeueCount)
			}
		}
		peeked, err := poison.Peek(ctx, pq, 5)
		if err != nil || len(peeked) != 5 {
			t.Fatalf("Peek 5: %d, %v", len(peeked), err)
		}
		for i, m := range peeked {
			if m.Body != nil || m.Size == 0 || (i > 0 && m.PoisonedAt.After(peeked[i-1].PoisonedAt)) {
				t.Errorf("peeked %d: %+v (want no body, newest first)", i, m)
			}
		}
		withBodies, err := poison.PeekBodies(ctx, pq, 5)
		if err != nil || len(withBodies) != 5 {
			t.Fatalf("PeekBodies 5: %d, %v", len(withBodies), err)
		}
		for i, m := range withBodies {
			if m.PoisonID != peeked[i].PoisonID || len(m.Body) != m.Size || !strings.HasPrefix(string(m.Body), "body-") {
				t.Errorf("peeked with bodies %d: %+v (want the same order as Peek, with the original body)", i, m)
			}
		}
		if _, err := poison.List(ctx, pq, "not a cursor!", 0); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("bad cursor: %v", err)
		}
		if _, err := poison.List(ctx, pq, "", poison.MaxLimit+1); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("limit above the maximum: %v", err)
		}
	})
}

func TestFindByPoisonIDOrOriginalID(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, _, pq *queue.Queue) {
		ctx := context.Background()
		ids := poisonN(t, pq, 40) // more than a peek shows
		m, err := poison.Find(ctx, pq, ids[37])
		if err != nil || string(m.Body) != "body-37" || m.ID != "orig-37" || m.PoisonID != ids[37] {
			t.Errorf("Find by poison id: %+v, %v", m, err)
		}
		m, err = poison.Find(ctx, pq, "orig-36")
		if err != nil || string(m.Body) != "body-36" || m.PoisonID != ids[36] {
			t.Errorf("Find by original id: %+v, %v", m, err)
		}
		if _, err := poison.Find(ctx, pq, "nope"); !errors.Is(err, poison.ErrNotFound) || !errors.Is(err, queue.ErrNotFound) {
			t.Errorf("Find of an unknown id: %v", err)
		}
		if bodies := drain(t, pq); len(bodies) != 40 {
			t.Errorf("after Find %d messages are visible, want 40", len(bodies))
		}
	})
}

func TestRequeueByIDPutsTheOriginalBodyBackThenDeletes(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, home, pq *queue.Queue) {
		ctx := context.Background()
		ids := poisonN(t, pq, 40)
		res, err := poison.Requeue(ctx, pq, onlyOrders(home), poison.Selection{IDs: []string{ids[2], "orig-38", ids[39], "nope"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Done) != 3 || len(res.Failed) != 0 || !slices.Equal(res.NotFound, []string{"nope"}) {
			t.Fatalf("requeue: %+v", res)
		}
		for _, d := range res.Done {
			if d.Queue != "orders" || d.NewID == "" {
				t.Errorf("requeued %+v: no queue or new id", d)
			}
		}
		back := drain(t, home)
		if slices.Sort(back); !slices.Equal(back, []string{"body-2", "body-38", "body-39"}) {
			t.Errorf("the queue got %q, want the three original bodies", back)
		}
		if left := drain(t, pq); len(left) != 37 {
			t.Errorf("%d messages left in the poison queue, want 37", len(left))
		}
	})
}

func TestRequeueAllSkipsDuplicatesAndKeepsWhatItCannotPut(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, home, pq *queue.Queue) {
		ctx := context.Background()
		poisonN(t, pq, 35)
		// A crash between a poison put and its delete left a second copy of
		// orig-0; a message from another queue cannot go back here.
		dup := sample([]byte("body-0"))
		dup.ID = "orig-0"
		other := sample([]byte("elsewhere"))
		other.ID, other.Queue = "x-1", "billing"
		for _, m := range []poison.Message{dup, other} {
			b, _ := poison.Encode(m, 0)
			if _, err := pq.Put(ctx, b, queue.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		res, err := poison.Requeue(ctx, pq, onlyOrders(home), poison.Selection{All: true})
		if err != nil {
			t.Fatal(err)
		}
		dups := 0
		for _, d := range res.Done {
			if d.Duplicate {
				dups++
			}
		}
		if len(res.Done) != 36 || dups != 1 || len(res.Failed) != 1 || res.Failed[0].ID != "x-1" {
			t.Fatalf("requeue all: %d done (%d duplicates), failed %+v", len(res.Done), dups, res.Failed)
		}
		if back := drain(t, home); len(back) != 35 {
			t.Errorf("%d messages back in the queue, want 35 (one per original)", len(back))
		}
		if left := drain(t, pq); !slices.Equal(left, []string{string(mustEncode(t, other))}) {
			t.Errorf("left in the poison queue: %q, want only the other queue's message", left)
		}
	})
}

// onlyOrders sends messages of "orders" (and bare ones) back to home and
// refuses any other queue.
func onlyOrders(home *queue.Queue) poison.Dest {
	return func(name string) (*queue.Queue, error) {
		if name != "" && name != "orders" {
			return nil, fmt.Errorf("no queue %q here", name)
		}
		return home, nil
	}
}

func mustEncode(t *testing.T, m poison.Message) []byte {
	t.Helper()
	b, err := poison.Encode(m, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPurgeByIDAndAll(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, home, pq *queue.Queue) {
		ctx := context.Background()
		ids := poisonN(t, pq, 40)
		res, err := poison.Purge(ctx, pq, poison.Selection{IDs: []string{ids[0], ids[33]}})
		if err != nil || len(res.Done) != 2 || len(res.NotFound) != 0 {
			t.Fatalf("purge by id: %+v, %v", res, err)
		}
		if p, _ := poison.List(ctx, pq, "", poison.MaxLimit); len(p.Messages) != 38 {
			t.Errorf("%d left after purging 2 of 40", len(p.Messages))
		}
		res, err = poison.Purge(ctx, pq, poison.Selection{All: true})
		if err != nil || len(res.Done) != 38 {
			t.Fatalf("purge all: %d done, %v", len(res.Done), err)
		}
		if n, _ := pq.Count(ctx); n != 0 {
			t.Errorf("%d messages after purge all", n)
		}
		if n, _ := home.Count(ctx); n != 0 {
			t.Errorf("purge put %d messages to the queue", n)
		}
		for _, sel := range []poison.Selection{{}, {All: true, IDs: []string{"a"}}, {IDs: []string{""}}} {
			if _, err := poison.Purge(ctx, pq, sel); !errors.Is(err, queue.ErrInvalidArgument) {
				t.Errorf("purge %+v: %v, want ErrInvalidArgument", sel, err)
			}
		}
	})
}

// TestRequeueAllLeavesMessagesPoisonedAgainDuringTheCall: a handler that
// still fails poisons a requeued message again while "requeue all" is
// still scanning; the new poison copy (whose original id is the id the
// requeue just put) is not requeued a second time in the same call, which
// would otherwise go round for as long as the scan finds new copies.
func TestRequeueAllLeavesMessagesPoisonedAgainDuringTheCall(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(t *testing.T) func(string, ...queue.Option) (*queue.Queue, error){
		"memory": func(*testing.T) func(string, ...queue.Option) (*queue.Queue, error) { return memory.NewStore().Queue },
		"sqlite": func(t *testing.T) func(string, ...queue.Option) (*queue.Queue, error) {
			db, err := sqlite.Open(filepath.Join(t.TempDir(), "q.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			return db.Queue
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			q := open(t)
			pq, err := q("orders-poison")
			if err != nil {
				t.Fatal(err)
			}
			// Every put to orders is poisoned again at once, as a busy
			// worker whose handler still fails would do.
			home, err := q("orders", queue.WithWrapper(func(d driver.Queue) driver.Queue { return repoisoning{d, pq} }))
			if err != nil {
				t.Fatal(err)
			}
			poisonN(t, pq, 40)
			res, err := poison.Requeue(ctx, pq, onlyOrders(home), poison.Selection{All: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Done) != 40 || len(res.Failed) != 0 {
				t.Fatalf("requeue all: %d done, %d failed, want 40 and 0", len(res.Done), len(res.Failed))
			}
			if back := drain(t, home); len(back) != 40 {
				t.Errorf("%d messages back in the queue, want 40", len(back))
			}
			if left := drain(t, pq); len(left) != 40 {
				t.Errorf("%d messages in the poison queue after the call, want the 40 poisoned again", len(left))
			}
		})
	}
}

// repoisoning is a driver whose every put is followed by a poison copy of
// the message in pq.
type repoisoning struct {
	driver.Queue
	pq *queue.Queue
}

func (r repoisoning) Put(ctx context.Context, body []byte, opts driver.PutOptions) (string, error) {
	id, err := r.Queue.Put(ctx, body, opts)
	if err != nil {
		return id, err
	}
	m := sample(body)
	m.ID = id
	b, err := poison.Encode(m, 0)
	if err == nil {
		_, err = r.pq.Put(ctx, b, queue.PutOptions{TTL: queue.NoExpiry})
	}
	return id, err
}
