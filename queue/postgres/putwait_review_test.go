package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres"
)

// TestPutDoesNotWaitForOpenTransactions: a Put outside the application's
// transactions must not wait for them to end. PutTx (and DeleteTx) take a
// counter row of the queue that no other transaction holds and hold it
// until the caller's transaction ends; a plain Put (and Delete, DeleteBatch
// and purge) updates the row of its backend, pid % 16, whoever holds it. So
// one open transaction that did a PutTx stalls the Puts of about 1 in 16 of
// the other connections until it ends (and deadlocks, until the caller's
// deadline, a flow that makes such a Put before its commit: the cause of
// TestWatchLeavesThePool failing about 1 run in 16, when the pool's two
// backends share a row). Here 16 open transactions hold all 16 rows, so
// that every backend's row is held whatever its pid: the Put either returns
// or waits on a row lock (read from pg_stat_activity, no clock involved).
func TestPutDoesNotWaitForOpenTransactions(t *testing.T) {
	t.Skip("open finding (leftovers): a plain Put/delete updates counter row pid % 16 and waits for an open PutTx/DeleteTx transaction holding it; the fix is in the Put and delete statements (issue 34's hot path): the lead decides")
	f := newTxFixtureURL(t, "pool_max_conns=24")
	ctx := context.Background()
	mon, err := pgxpool.New(ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	var txs []pgx.Tx
	end := func() {
		for _, tx := range txs {
			if err := tx.Commit(ctx); err != nil {
				t.Error(err)
			}
		}
		txs = nil
	}
	defer end()
	for range 16 {
		tx, err := f.db.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		txs = append(txs, tx)
		if _, err := postgres.PutTx(ctx, tx, f.q, []byte("in a transaction"), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.q.Put(ctx, []byte("outside"), queue.PutOptions{})
		done <- err
	}()
	var waited bool
	waitFor(t, 30*time.Second, "the put to return or to wait on a lock", func() bool {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("the put outside the transactions: %v", err)
			}
			return true
		default:
		}
		var k int
		_ = mon.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%counts SET n = n + 1 WHERE queue_id = $2 AND shard = pg_backend_pid()%'`,
			pgx.Identifier{f.schema}.Sanitize()).Scan(&k)
		waited = k > 0
		return waited
	})
	if waited {
		end()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		t.Errorf("a Put outside 16 open transactions that each did a PutTx waited for their commit on a counter row")
	}
}
