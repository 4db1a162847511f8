package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// TestDeleteTxOtherDatabaseSameQueue: a delete in a transaction on another
// database of the server, whose schema of the same name holds a queue of
// the same name at the same id (two databases set up alike), is refused
// with ErrOtherDatabase, as a put is: not ErrNotFound (the message is not
// gone: it is in the queue's own database) nor ErrReceiptMismatch (for a
// message of the same id there), and it deletes nothing there.
func TestDeleteTxOtherDatabaseSameQueue(t *testing.T) {
	f := newTxFixture(t)
	ctx := context.Background()
	other := strings.Replace(f.url, "/test?", "/postgres?", 1)
	if other == f.url {
		t.Skip("cannot name another database in " + f.url)
	}
	db2, err := postgres.Open(ctx, other, postgres.WithSchema(f.schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db2.Close(); _ = pgtest.Drop(other, f.schema) })
	q2, err := db2.Queue(ctx, "work") // id 1 there too
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.q.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	ms, err := f.q.Get(ctx, 1, time.Minute)
	if err != nil || len(ms) != 1 {
		t.Fatalf("Get: %d, %v", len(ms), err)
	}
	try := func(what string) {
		t.Helper()
		tx, err := db2.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		if err := postgres.DeleteTx(ctx, tx, f.q, ms[0]); !errors.Is(err, postgres.ErrOtherDatabase) {
			t.Errorf("%s: DeleteTx = %v, want ErrOtherDatabase", what, err)
		}
	}
	try("no message of that id there")
	// A message of the same id in the other database's queue.
	if _, err := q2.Put(ctx, []byte("theirs"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	try("a message of the same id there")
	var n int
	if err := db2.Pool().QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{f.schema, "messages"}.Sanitize()).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the other database holds %d messages (%v), want its own 1", n, err)
	}
	// The message is still the queue's, and its receipt deletes it.
	if err := f.q.Delete(ctx, ms[0].ID, ms[0].PopReceipt); err != nil {
		t.Fatalf("Delete in the queue's own database: %v", err)
	}
}
