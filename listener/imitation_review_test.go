package listener_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/poison"
)

// A body that imitates an envelope, at a poison queue limit too small for
// any header, is not poisoned (TestPoisonNeverPutsAnImitationOfAnEnvelopeBare).
// It must not run for ever either: a message that can never be poisoned
// and fails permanently runs again at every retry delay until its
// time-to-live ends (never, with no expiry); the poison rules allow
// MaxDequeueCount runs, and it must not be got again and again either.
func TestAnImitationThatCannotBePoisonedDoesNotRunForever(t *testing.T) {
	c := clock.NewFake(clock.Epoch)
	store := memory.NewStore(memory.WithClock(c), memory.WithMaxBodySize(64))
	q, err := store.Queue("work")
	if err != nil {
		t.Fatal(err)
	}
	pq, err := store.Queue("work-poison")
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	h := func(context.Context, *queue.Message) error {
		runs.Add(1)
		return handler.Permanent(errors.New("bad"))
	}
	l, err := listener.New(q, h, listener.Options{Poison: pq, Clock: c, MaxDequeueCount: 3})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, clock: c, store: store, raw: q, q: q, l: l}
	body := []byte(poison.Magic + `{"id":"x","queue":"payments","size":1}` + "\nx")
	if _, err := q.Put(context.Background(), body, queue.PutOptions{TTL: queue.NoExpiry}); err != nil {
		t.Fatal(err)
	}
	f.start()
	eventually(t, "the message runs 8 times or stops", func() bool {
		c.Advance(time.Minute)
		return runs.Load() >= 8 || c.Now().Sub(clock.Epoch) > 24*time.Hour
	})
	if n := runs.Load(); n > 3 {
		t.Errorf("the handler ran %d times (and goes on) for a message that cannot be poisoned; want at most MaxDequeueCount (3)", n)
	}
	// It stops running at the maximum dequeue count, but it is got again
	// at the end of every visibility timeout, and each time its poisoning
	// fails again (an error in the log), for as long as it lives.
	ms, err := q.Peek(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	// Hidden, not lost: it stays in its queue for an operator to find.
	if n, err := q.Count(context.Background()); err != nil || n != 1 {
		t.Errorf("Count = %d, %v; want the message still in its queue", n, err)
	}
	if len(ms) == 1 && ms[0].DequeueCount > 10 {
		t.Errorf("after %s the message was got %d times (runs %d), and goes on: it cannot be poisoned and is never settled", c.Now().Sub(clock.Epoch), ms[0].DequeueCount, runs.Load())
	}
}

// An unpoisonable message that has expired by the listener's clock is left
// to its visibility timeout, as an expired message whose poisoning failed
// always was (retryLater, holdExpired), not released: a backend whose
// clock lags the listener's still hands it out, and released at once it
// would run again, fail, and be released again, in a tight loop until the
// backend's clock passes its expiry.
func TestAnExpiredImitationIsNotReleasedToRunAgain(t *testing.T) {
	sc := clock.NewFake(clock.Epoch)                    // the backend's
	lc := clock.NewFake(clock.Epoch.Add(2 * time.Hour)) // the listener's, ahead
	store := memory.NewStore(memory.WithClock(sc), memory.WithMaxBodySize(64))
	q, err := store.Queue("work")
	if err != nil {
		t.Fatal(err)
	}
	pq, err := store.Queue("work-poison")
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	h := func(context.Context, *queue.Message) error {
		runs.Add(1)
		return handler.Permanent(errors.New("bad"))
	}
	l, err := listener.New(q, h, listener.Options{Poison: pq, Clock: lc, MaxDequeueCount: 3})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, clock: lc, store: store, raw: q, q: q, l: l}
	body := []byte(poison.Magic + `{"id":"x","queue":"payments","size":1}` + "\nx")
	if _, err := q.Put(context.Background(), body, queue.PutOptions{TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	f.start()
	start := lc.Now()
	eventually(t, "the message runs 3 times or the listener's clock walks 5 minutes", func() bool {
		lc.Advance(5 * time.Second)
		return runs.Load() >= 3 || lc.Now().Sub(start) > 5*time.Minute
	})
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times in %s of the listener's clock (the backend's stood still): an expired message that cannot be poisoned is released and runs again at once", n, lc.Now().Sub(start))
	}
}
