package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// TestOpenDoesNotWaitForOpenTransactions: opening a queue that exists (a
// process that starts, a second DB on the schema) must not wait for an
// application's open transaction that did a PutTx on it. register inserts
// the queue's counter rows with ON CONFLICT DO NOTHING, whose conflict
// check waits for the transaction that updated a row (the row's new
// version is that transaction's), so a worker started while a long
// transaction was open hung until it ended; and a flow that opened the
// queue on another DB before its commit, until its deadline. The open
// either returns or waits on a lock (read from pg_stat_activity, no clock
// involved).
func TestOpenDoesNotWaitForOpenTransactions(t *testing.T) {
	f := newTxFixture(t)
	ctx := context.Background()
	tx, err := f.db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := postgres.PutTx(ctx, tx, f.q, []byte("in a transaction"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	other := openDB(t, f.schema)
	done := make(chan error, 1)
	go func() {
		q, err := other.Queue(ctx, "work")
		if err == nil {
			_ = q.Close()
		}
		done <- err
	}()
	mon, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mon.Close(ctx) }()
	var waited bool
	waitFor(t, 30*time.Second, "the open to return or to wait on a lock", func() bool {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			return true
		default:
		}
		var k int
		_ = mon.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO ' || $1 || '.counts%'`, pgx.Identifier{f.schema}.Sanitize()).Scan(&k)
		waited = k > 0
		return waited
	})
	if waited {
		_ = tx.Rollback(ctx)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		t.Fatal("opening the queue waited for an open transaction that did a PutTx")
	}
}
