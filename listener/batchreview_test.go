package listener_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/scaling"
)

// failRenewals fails every renewal (d > 0) with a transient error while
// on is set: a backend that refuses the renewals for a while.
type failRenewals struct {
	driver.Queue
	on    atomic.Bool
	fails atomic.Int32
}

func (q *failRenewals) UpdateVisibility(ctx context.Context, id, receipt string, d time.Duration) (string, error) {
	if q.on.Load() && d > 0 {
		q.fails.Add(1)
		return "", driver.Transient(errors.New("injected renewal failure"), 0)
	}
	return q.Queue.UpdateVisibility(ctx, id, receipt, d)
}

// A message whose lease ended while it waited in the pool (its renewals
// failed) may be another consumer's by now: the call must not run it
// (its context is live, nothing tells the handler), as a message held
// through a worker fault's pause is not run again (holdLapsed).
func TestBatchDoesNotRunMessagesWhoseLeaseLapsedInThePool(t *testing.T) {
	fr := &failRenewals{}
	const vis = 10 * time.Second
	var mu sync.Mutex
	var ran []string
	bh := func(ctx context.Context, ms []*queue.Message) []error {
		mu.Lock()
		defer mu.Unlock()
		if ctx.Err() == nil {
			for _, m := range ms {
				ran = append(ran, m.ID)
			}
		}
		return nil
	}
	f := newFixtureWith(t, func(context.Context, *queue.Message) error { return nil }, listener.Options{VisibilityTimeout: vis},
		func(d driver.Queue) driver.Queue { fr.Queue = d; return fr })
	// The task sleeps long after its empty get, so that the other
	// consumer, not this listener again, gets the messages.
	o := listener.Options{BatchMax: 100, BatchWait: 3 * vis, VisibilityTimeout: vis, Clock: f.clock,
		Idle: scaling.IdleBackoff{Min: 4 * time.Minute, Max: 4 * time.Minute}}
	var err error
	if f.l, err = listener.NewBatch(f.q, bh, o); err != nil {
		t.Fatal(err)
	}
	f.put(3)
	fr.on.Store(true)
	f.start()
	eventually(t, "the 3 are fetched, and the task paces or sleeps", func() bool {
		return f.l.LocalState().InFlight == 3 && f.l.PacingTasks()+f.l.LocalState().IdleTasks > 0
	})
	// Past the lease: every renewal failed.
	f.walk(vis + time.Second)
	if fr.fails.Load() == 0 {
		t.Fatal("no renewal was tried")
	}
	// Another consumer gets them, as it may now.
	other, err := f.raw.Get(context.Background(), 32, time.Hour)
	if err != nil || len(other) != 3 {
		t.Fatalf("the other consumer got %d (%v), want the 3 whose lease ended", len(other), err)
	}
	// The fill wait ends.
	f.walk(2 * vis)
	eventually(t, "the pool is empty", func() bool { return f.l.LocalState().InFlight == 0 })
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 0 {
		t.Fatalf("the call ran %v with a live context after their leases ended (another consumer holds them)", ran)
	}
	if st := f.l.Stats(); st.LeasesLost != 3 {
		t.Errorf("%d leases lost, want 3", st.LeasesLost)
	}
}
