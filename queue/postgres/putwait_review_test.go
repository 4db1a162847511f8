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
// until the caller's transaction ends. They used to take it among the rows
// the plain statements update (a Put, Delete, DeleteBatch or purge uses its
// backend's, pid % 16, whoever holds it), so one open transaction that did
// a PutTx stalled the Puts of about 1 in 16 of the other connections until
// it ended, and deadlocked until the caller's deadline a flow that made such
// a Put before its commit (TestWatchLeavesThePool failed about 1 run in 16).
// Here 16 open transactions take 16 rows, enough to hold every plain row
// whatever the backends' pids if they were shared: the Put either returns
// or waits on a row lock (read from pg_stat_activity, no clock involved).
func TestPutDoesNotWaitForOpenTransactions(t *testing.T) {
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

// A queue created before callers' transactions had counter rows of their
// own (16 rows, all the plain statements') gets them when a process opens
// it, so that a PutTx and a DeleteTx count: Count stays exact.
func TestQueueOfSixteenCounterRowsCountsTransactions(t *testing.T) {
	f := newTxFixtureURL(t, "")
	ctx := context.Background()
	cnt := pgx.Identifier{f.schema, "counts"}.Sanitize()
	qs := pgx.Identifier{f.schema, "queues"}.Sanitize()
	if _, err := f.db.Pool().Exec(ctx, `DELETE FROM `+cnt+` WHERE shard >= 16 AND queue_id = (SELECT id FROM `+qs+` WHERE name = 'work')`); err != nil {
		t.Fatal(err)
	}
	db, err := postgres.Open(ctx, f.url, postgres.WithSchema(f.schema))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q, err := db.Queue(ctx, "work")
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.PutTx(ctx, tx, q, []byte("a"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Put(ctx, []byte("b"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := q.Count(ctx); err != nil || n != 2 {
		t.Fatalf("Count = %d, %v after a PutTx and a Put; want 2", n, err)
	}
}
