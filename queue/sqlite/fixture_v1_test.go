package sqlite

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
)

// TestWriteV1Fixture wrote testdata/v1.db with the schema-version-1 code
// (commit "sqlite: a small schema-v1 fixture file, written by today's
// schema"). It runs only when ADAPTQ_WRITE_V1_FIXTURE names the output file;
// a build that writes a later schema cannot write version 1 again, so this
// test goes with the step that changes the schema.
//
// The file, on the fake clock's epoch (clock.Epoch):
//   - queue "orders": a, b, c, d put; a got once (visibility 1 min, still
//     held); b got and released (dequeue count 1, visible); c with a TTL
//     of 1 h; d put with an initial delay of 10 min;
//   - queue "empty": created, no messages;
//   - queue "ttl": e put with a TTL of 1 s, then the clock moved 2 s, so it
//     is expired but still in the file; f with no expiry.
//
// The receipt of a is printed to the test log and recorded in
// testdata/v1.txt, with the ids.
func TestWriteV1Fixture(t *testing.T) {
	out := os.Getenv("ADAPTQ_WRITE_V1_FIXTURE")
	if out == "" {
		t.Skip("set ADAPTQ_WRITE_V1_FIXTURE=path to write the schema-v1 fixture")
	}
	c := clock.NewFake(clock.Epoch)
	path := filepath.Join(t.TempDir(), "v1.db")
	db, err := Open(path, WithClock(c))
	if err != nil {
		t.Fatal(err)
	}
	orders := mustQueue(t, db, "orders")
	mustQueue(t, db, "empty")
	ttl := mustQueue(t, db, "ttl")
	ida := mustPut(t, orders, "a", queue.PutOptions{})
	idb := mustPut(t, orders, "b", queue.PutOptions{})
	idc := mustPut(t, orders, "c", queue.PutOptions{TTL: time.Hour})
	idd := mustPut(t, orders, "d", queue.PutOptions{InitialVisibilityDelay: 10 * time.Minute})
	ide := mustPut(t, ttl, "e", queue.PutOptions{TTL: time.Second})
	idf := mustPut(t, ttl, "f", queue.PutOptions{TTL: queue.NoExpiry})
	ms := mustGet(t, orders, 2, time.Minute)
	if len(ms) != 2 || ms[0].ID != ida || ms[1].ID != idb {
		t.Fatalf("got %v", ms)
	}
	if _, err := orders.UpdateVisibility(ctx, ms[1].ID, ms[1].PopReceipt, 0); err != nil {
		t.Fatal(err)
	}
	c.Advance(2 * time.Second)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + "-wal"); err == nil {
		t.Fatal("the WAL outlived Close: the fixture would be incomplete")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("ids a=%s b=%s c=%s d=%s e=%s f=%s; receipt of a: %s; %d bytes", ida, idb, idc, idd, ide, idf, ms[0].PopReceipt, len(b))
}
