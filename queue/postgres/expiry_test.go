package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// putConcurrently puts n messages with opts through 8 goroutines.
func putConcurrently(t *testing.T, q *queue.Queue, n int, opts queue.PutOptions) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				if _, err := q.Put(context.Background(), []byte(fmt.Sprint(i)), opts); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestSweepReachesEveryExpiredMessage (issue 25, defect 9): 2,500 expired
// messages at the head of a queue made every Get step over them (50,000
// took the median Get from 0.52 ms to 16 ms), and the sweep took 1,000 a
// minute from the head only. One Sweep now deletes every expired message,
// wherever it is, and a Get then reads none of them: asserted as the rows
// the Get's plan reads and discards (EXPLAIN ANALYZE), never as time.
func TestSweepReachesEveryExpiredMessage(t *testing.T) {
	schema := pgtest.Schema(t)
	c := clock.NewFake(clock.Epoch)
	db := openDB(t, schema, postgres.WithClock(c))
	ctx := context.Background()

	head, err := db.Queue(ctx, "expired-head")
	if err != nil {
		t.Fatal(err)
	}
	const backlog = 2500
	putConcurrently(t, head, backlog, queue.PutOptions{TTL: time.Minute})
	live, err := head.Put(ctx, []byte("live"), queue.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Expired messages behind live ones, in a queue of their own.
	behind, err := db.Queue(ctx, "expired-behind")
	if err != nil {
		t.Fatal(err)
	}
	putConcurrently(t, behind, 1100, queue.PutOptions{})
	putConcurrently(t, behind, 1500, queue.PutOptions{TTL: time.Minute})
	c.Advance(2 * time.Minute)

	// The measure sees the backlog: a Get steps over all of it.
	if w, err := getWork(ctx, db, "expired-head"); err != nil || w < backlog {
		t.Fatalf("before the sweep a Get discards %d rows (%v), want at least %d", w, err, backlog)
	}
	if n, err := db.Sweep(ctx, "expired-head"); err != nil || n != backlog {
		t.Fatalf("Sweep(expired-head) = %d, %v; want %d", n, err, backlog)
	}
	if w, err := getWork(ctx, db, "expired-head"); err != nil || w > 0 {
		t.Fatalf("after the sweep a Get discards %d rows (%v), want 0", w, err)
	}
	if n, err := db.Sweep(ctx, "expired-behind"); err != nil || n != 1500 {
		t.Fatalf("Sweep(expired-behind) = %d, %v; want 1500", n, err)
	}
	for _, q := range []*queue.Queue{head, behind} {
		want := map[*queue.Queue]int{head: 1, behind: 1100}[q]
		if n, err := q.Count(ctx); err != nil || n != want {
			t.Fatalf("Count(%s) after the sweep = %d, %v; want %d", q.Name(), n, err, want)
		}
		if s, err := storedRows(ctx, db, q.Name()); err != nil || s != want {
			t.Fatalf("%s stores %d messages after the sweep (%v), want %d", q.Name(), s, err, want)
		}
	}
	ms, err := head.Get(ctx, 32, time.Minute)
	if err != nil || len(ms) != 1 || ms[0].ID != live {
		t.Fatalf("Get = %d messages, %v; want the live one", len(ms), err)
	}
}

// TestReadsSweepWithoutLiveWork (issue 25, defect 8): expired messages of
// a queue nobody gets from left Count, Depth and the table only when a Get
// found live work. A Count now starts the sweep itself.
func TestReadsSweepWithoutLiveWork(t *testing.T) {
	schema := pgtest.Schema(t)
	c := clock.NewFake(clock.Epoch)
	db := openDB(t, schema, postgres.WithClock(c))
	ctx := context.Background()
	q, err := db.Queue(ctx, "idle")
	if err != nil {
		t.Fatal(err)
	}
	putConcurrently(t, q, 50, queue.PutOptions{TTL: time.Second})
	c.Advance(2 * time.Second)
	waitFor(t, hang, "Count to drop the expired messages", func() bool {
		n, err := q.Count(ctx)
		return err == nil && n == 0
	})
	if d, err := q.Depth(ctx); err != nil || d.Visible != 0 || d.InFlight != 0 {
		t.Fatalf("Depth = %+v, %v; want empty", d, err)
	}
	if s, err := storedRows(ctx, db, "idle"); err != nil || s != 0 {
		t.Fatalf("the table holds %d messages of the queue (%v), want 0", s, err)
	}
}

// TestSweepTurnIsBounded: a background sweep of one queue runs a bounded
// number of statements and then gives the DB's single sweep slot back, so a
// queue that keeps expiring messages faster than a statement deletes them
// cannot keep the DB's other queues from being swept; the next turn goes on
// where this one stopped.
func TestSweepTurnIsBounded(t *testing.T) {
	schema := pgtest.Schema(t)
	c := clock.NewFake(clock.Epoch)
	db := openDB(t, schema, postgres.WithClock(c))
	ctx := context.Background()
	q, err := db.Queue(ctx, "turns")
	if err != nil {
		t.Fatal(err)
	}
	putConcurrently(t, q, 35, queue.PutOptions{TTL: time.Minute})
	c.Advance(2 * time.Minute)
	if n, err := postgres.SweepTurn(ctx, db, "turns", 10, 2); err != nil || n != 20 {
		t.Fatalf("a turn of 2 statements of 10 swept %d (%v), want 20", n, err)
	}
	if n, err := postgres.SweepTurn(ctx, db, "turns", 10, 2); err != nil || n != 15 {
		t.Fatalf("the next turn swept %d (%v), want the 15 left: 10, then 5 ends it", n, err)
	}
	if n, err := q.Count(ctx); err != nil || n != 0 {
		t.Fatalf("Count after two turns = %d, %v", n, err)
	}
}
