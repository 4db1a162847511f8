package sqlite

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
)

// settleBatchInTx is a batch handler's transaction: a row for each
// message whose delete in the transaction succeeded, all committed
// together; each message's outcome is its delete's.
func settleBatchInTx(ctx context.Context, s *sql.DB, q *queue.Queue, ms []*queue.Message) []error {
	res := make([]error, len(ms))
	tx, err := s.BeginTx(ctx, nil)
	if err != nil {
		return handler.FailAll(len(ms), err)
	}
	defer tx.Rollback() //nolint:errcheck
	for i, m := range ms {
		if res[i] = DeleteTx(ctx, tx, q, m); res[i] != nil {
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (note, msg_id) VALUES ('batch', ?)`, m.ID); err != nil {
			return handler.FailAll(len(ms), err)
		}
	}
	if err := tx.Commit(); err != nil {
		return handler.FailAll(len(ms), err)
	}
	return res
}

// walkClock moves c on by d a second at a time, letting what each step
// set off run first.
func walkClock(t *testing.T, c *clock.Fake, d time.Duration) {
	t.Helper()
	for ; d > 0; d -= time.Second {
		c.Advance(min(d, time.Second))
		testutil.Eventually(t, 10*time.Second, "the clock's work is done", func() bool {
			return c.Running() == 0 && c.Unreceived() == 0
		})
	}
}

// TestBatchListenerSettleInTxSQLite: a batch handler that deletes its
// messages in its own transaction settles them for the listener, as a
// single handler does (issue 30): with the newest receipt, though the
// messages were renewed while they waited for their call to fill; counted
// processed and deleted; never deleted again by the listener.
func TestBatchListenerSettleInTxSQLite(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait time.Duration // the fill wait: past half the visibility, the messages are renewed first
	}{{"at once", 0}, {"after renewal", 30 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			db, fc, _ := newDB(t)
			q := mustQueue(t, db, "work")
			s := appDB(t, db, nil)
			const n = 4
			for range n {
				mustPut(t, q, "x", queue.PutOptions{})
			}
			l, err := listener.NewBatch(q, func(ctx context.Context, ms []*queue.Message) []error {
				return settleBatchInTx(ctx, s, q, ms)
			}, listener.Options{Tasks: 1, MinTasks: 1, MaxTasks: 1, BatchSize: 8, BatchMax: 8, BatchWait: tc.wait,
				VisibilityTimeout: 20 * time.Second, SafetyInterval: time.Hour, Clock: fc})
			if err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithCancel(ctx)
			errc := make(chan error, 1)
			go func() { errc <- l.Run(rctx) }()
			testutil.Eventually(t, 10*time.Second, "the 4 are fetched", func() bool {
				return l.Stats().Processed+l.Stats().Failed == n || l.LocalState().InFlight == n
			})
			walkClock(t, fc, tc.wait+time.Second)
			testutil.Eventually(t, 10*time.Second, "the call ends", func() bool {
				st := l.Stats()
				// Any delete of the listener's has ended too (InFlight
				// falls before it), so the stop's clock moves cancel none.
				return st.Processed+st.Failed == n && l.LocalState().InFlight == 0 &&
					st.Deleted+st.NotFound+st.DeleteErrors+st.Failed >= n
			})
			cancel()
			for {
				select {
				case err := <-errc:
					if err != nil {
						t.Fatal(err)
					}
				default:
					fc.AdvanceToNext()
					time.Sleep(time.Millisecond)
					continue
				}
				break
			}
			st := l.Stats()
			if st.Processed != n || st.Deleted != n || st.Failed != 0 || st.NotFound != 0 || st.ReceiptMismatches != 0 {
				t.Fatalf("stats: processed %d deleted %d failed %d notFound %d mismatches %d; want %d processed and deleted, nothing else",
					st.Processed, st.Deleted, st.Failed, st.NotFound, st.ReceiptMismatches, n)
			}
			if orderRows(t, s, "1") != n || rawCount(t, db, "messages") != 0 {
				t.Fatal("want one row per message and no message left")
			}
		})
	}
}
