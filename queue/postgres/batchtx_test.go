package postgres_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres"
)

// TestBatchListenerSettleInTx: a batch handler deletes its call's
// messages in one transaction and holds it open past half their
// visibility timeout. The renewal due meanwhile leaves the settled
// messages alone (it would wait on their row locks, then find them gone
// at the commit, count their leases lost and cancel the call), and the
// listener counts them processed and deleted, deleting none itself.
func TestBatchListenerSettleInTx(t *testing.T) {
	fc := clock.NewFake(time.Now())
	f := newTxFixture(t, postgres.WithClock(fc))
	ctx := context.Background()
	const n = 5
	for range n {
		if _, err := f.q.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	settled, proceed := make(chan struct{}), make(chan struct{})
	var cancelled atomic.Bool
	bh := func(ctx context.Context, ms []*queue.Message) []error {
		res := make([]error, len(ms))
		tx, err := f.db.Pool().Begin(ctx)
		if err != nil {
			return fill(res, err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		for i, m := range ms {
			if res[i] = postgres.DeleteTx(ctx, tx, f.q, m); res[i] != nil {
				continue
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+f.orders+` (note, msg_id) VALUES ('batch', $1)`, m.ID); err != nil {
				return fill(res, err)
			}
		}
		close(settled)
		<-proceed
		cancelled.Store(ctx.Err() != nil)
		if err := tx.Commit(ctx); err != nil {
			return fill(res, err)
		}
		return res
	}
	const vis = 20 * time.Second
	l, err := listener.NewBatch(f.q, bh, listener.Options{Tasks: 1, MinTasks: 1, MaxTasks: 1, BatchSize: 8, BatchMax: n,
		VisibilityTimeout: vis, SafetyInterval: time.Hour, Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- l.Run(rctx) }()
	<-settled
	// The renewal falls due while the transaction holds the rows.
	fc.Advance(vis/2 + time.Second)
	waitFor(t, 10*time.Second, "the renewal due ends (it must not wait on the settled rows)", func() bool {
		return fc.Running() == 0 && l.Stats().Renewed+l.Stats().LeasesLost == 0
	})
	close(proceed)
	waitFor(t, 10*time.Second, "the call ends", func() bool {
		st := l.Stats()
		return st.Processed+st.Failed == n && l.LocalState().InFlight == 0 && st.Deleted+st.NotFound+st.Failed >= n
	})
	cancel()
	for done := false; !done; {
		select {
		case err := <-errc:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			done = true
		case <-time.After(time.Millisecond):
			fc.AdvanceToNext() // the shutdown grace
		}
	}
	st := l.Stats()
	if st.Processed != n || st.Deleted != n || st.NotFound != 0 || st.LeasesLost != 0 || st.Failed != 0 || cancelled.Load() {
		t.Fatalf("stats: processed %d deleted %d notFound %d leases lost %d failed %d, call cancelled %v; want %d processed and deleted, nothing else",
			st.Processed, st.Deleted, st.NotFound, st.LeasesLost, st.Failed, cancelled.Load(), n)
	}
	if c := f.count(t, "true"); c != n {
		t.Fatalf("%d order rows, want %d", c, n)
	}
	if c, _ := f.q.Count(ctx); c != 0 {
		t.Fatalf("Count = %d", c)
	}
}

func fill(res []error, err error) []error {
	for i := range res {
		res[i] = err
	}
	return res
}
