package listener_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
)

// Adversarial review of settle in transaction (issue 30).

// A handler whose transaction deleted its message and rolled back, and
// which then failed for the worker's own resources, has its message held
// through the pause: renewal must go on extending it (the delete did not
// commit), so that it runs again here in the same delivery, not lose its
// lease to the pause and come back to another consumer.
func TestReviewSettledThenRolledBackIsRenewedThroughAFault(t *testing.T) {
	var runs atomic.Int32
	var second atomic.Int32 // the dequeue count of the second run
	h := func(ctx context.Context, m *queue.Message) error {
		if runs.Add(1) == 1 {
			// The transaction's delete succeeded, then the transaction
			// rolled back.
			if err := queue.SettleTx(ctx, m, func(string) error { return nil }); err != nil {
				return err
			}
			return emfile()
		}
		second.Store(int32(m.DequeueCount))
		return nil
	}
	vis := 4 * time.Second
	f := newFixture(t, h, listener.Options{VisibilityTimeout: vis, Idle: poisonIdle,
		ErrorBackoffInitial: 3 * vis, ErrorBackoffMax: time.Minute, Dispatch: listener.DispatchParallel})
	f.put(1)
	f.start()
	advanceUntil(t, f, "the second run's delete", func() bool { return f.l.Stats().Deleted == 1 })
	if s := f.l.Stats(); runs.Load() != 2 || second.Load() != 1 || s.LeasesLost != 0 {
		t.Fatalf("%d runs, the second at dequeue count %d, stats %+v: want the message renewed through the pause and run again in its first delivery",
			runs.Load(), second.Load(), s)
	}
}
