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

// TestRegisterRacingAnOldVersionKeepsTxCounterRows: a queue created by a
// version that kept 16 counter rows, in a transaction that commits while
// this version's register waits on its insert, must still get the rows
// PutTx and DeleteTx update (16–31). register's insert then finds the
// conflict and its select sees no row (the statement's snapshot predates
// the commit); it used to read the id with a bare lookup that creates no
// counter rows, so a PutTx counted nothing (UPDATE of a missing row) and
// Count answered 0 for a queue holding a message. The wait is read from
// pg_stat_activity, no clock involved.
func TestRegisterRacingAnOldVersionKeepsTxCounterRows(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.Schema(t)
	db := openDB(t, schema) // creates the schema
	sq := pgx.Identifier{schema}.Sanitize()

	old, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = old.Close(ctx) }()
	otx, err := old.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = otx.Rollback(ctx) }()
	// What the 16-row version's register did, left uncommitted.
	if _, err := otx.Exec(ctx, `WITH q AS (INSERT INTO `+sq+`.queues (name) VALUES ('legacy') RETURNING id)
		INSERT INTO `+sq+`.counts (queue_id, shard) SELECT q.id, g FROM q, generate_series(0, 15) g`); err != nil {
		t.Fatal(err)
	}

	type opened struct {
		q   *queue.Queue
		err error
	}
	got := make(chan opened, 1)
	go func() {
		q, err := db.Queue(ctx, "legacy")
		got <- opened{q, err}
	}()
	mon, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mon.Close(ctx) }()
	waitFor(t, 30*time.Second, "register to wait on the old version's insert", func() bool {
		var k int
		_ = mon.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO ' || $1 || '.queues%'`, sq).Scan(&k)
		return k > 0
	})
	if err := otx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-got
	if o.err != nil {
		t.Fatal(o.err)
	}
	tx, err := db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.PutTx(ctx, tx, o.q, []byte("in a transaction"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := o.q.Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("Count after one committed PutTx = %d, want 1", n)
	}
}
