package sqlite

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// TestMigrateV1 opens testdata/v1.db, a file written by schema version 1
// (see testdata/v1.txt), and checks that it migrates to the current schema
// and incremental auto-vacuum with every message, state, receipt and id
// sequence as it was.
func TestMigrateV1(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "v1.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "v1.db")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	c := clock.NewFake(clock.Epoch.Add(2 * time.Second)) // where the fixture's clock stopped
	open := func() *DB {
		t.Helper()
		db, err := Open(path, WithClock(c))
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	db := open()
	var version, av int
	db.w.QueryRow("PRAGMA user_version").Scan(&version)
	db.w.QueryRow("PRAGMA auto_vacuum").Scan(&av)
	if version != schemaVersion || av != 2 {
		t.Fatalf("after migration: user_version %d, auto_vacuum %d; want %d, 2 (incremental)", version, av, schemaVersion)
	}
	var ok string
	if err := db.w.QueryRow("PRAGMA integrity_check").Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("integrity_check: %q, %v", ok, err)
	}

	orders, empty, ttl := mustQueue(t, db, "orders"), mustQueue(t, db, "empty"), mustQueue(t, db, "ttl")
	for _, tc := range []struct {
		q    *queue.Queue
		want int
	}{{orders, 4}, {empty, 0}, {ttl, 1}} {
		if n, err := tc.q.Count(ctx); err != nil || n != tc.want {
			t.Errorf("Count(%s) = %d, %v; want %d", tc.q.Name(), n, err, tc.want)
		}
	}
	// a is held (receipt in v1.txt), b was released, c is visible, d delayed.
	if ps, err := orders.Peek(ctx, 32); err != nil || bodies(ps) != "b,c" || ps[0].DequeueCount != 1 || ps[1].DequeueCount != 0 {
		t.Fatalf("Peek(orders) = %q (%v)", bodies(ps), err)
	}
	ms := mustGet(t, orders, 32, time.Minute)
	if bodies(ms) != "b,c" || ms[0].ID != "2" || ms[0].DequeueCount != 2 || ms[1].ID != "3" ||
		ms[1].ExpiresAt != clock.Epoch.Add(time.Hour).UTC() {
		t.Fatalf("Get(orders) after migration = %q %+v", bodies(ms), ms)
	}
	if err := orders.Delete(ctx, "1", "0000000000000000"); !errors.Is(err, queue.ErrReceiptMismatch) {
		t.Fatalf("Delete of a with a wrong receipt: %v, want ErrReceiptMismatch", err)
	}
	if err := orders.Delete(ctx, "1", "570917ca370be480"); err != nil {
		t.Fatalf("Delete of a with its v1 receipt: %v", err)
	}
	if ms := mustGet(t, ttl, 32, time.Minute); bodies(ms) != "f" || !ms[0].ExpiresAt.IsZero() || ms[0].Metadata != nil {
		t.Fatalf("Get(ttl) = %q, want f with no expiry", bodies(ms))
	}
	// Ids go on from the v1 sequence.
	if id := mustPut(t, empty, "g", queue.PutOptions{Metadata: map[string]string{"tenant": "t1"}}); id != "7" {
		t.Fatalf("first id after migration = %s, want 7", id)
	}
	// Version 3's metadata: kept for a message put after the migration,
	// none for the ones from before.
	if ps, err := empty.Peek(ctx, 32); err != nil || len(ps) != 1 || ps[0].Metadata["tenant"] != "t1" {
		t.Fatalf("Peek(empty) after a put with metadata = %+v, %v", ps, err)
	}
	c.Advance(10 * time.Minute)
	if ms := mustGet(t, orders, 32, time.Minute); bodies(ms) != "b,c,d" {
		t.Fatalf("Get(orders) 10 min later = %q, want b,c,d", bodies(ms))
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Opened again: nothing left to migrate, nothing lost.
	db = open()
	defer db.Close()
	if n, err := mustQueue(t, db, "orders").Count(ctx); err != nil || n != 3 {
		t.Fatalf("Count(orders) after reopen = %d, %v; want 3", n, err)
	}
}

// TestDepthStaysExact checks the depth the triggers keep against a count of
// the rows through every path that adds or removes messages.
func TestDepthStaysExact(t *testing.T) {
	db, c, _ := newDB(t)
	q, other := mustQueue(t, db, "depth"), mustQueue(t, db, "other")
	check := func(step string) {
		t.Helper()
		for _, q := range []*queue.Queue{q, other} {
			var depth, rows int
			if err := db.r.QueryRow("SELECT depth, (SELECT count(*) FROM messages WHERE queue_id = queues.id) FROM queues WHERE name = ?",
				q.Name()).Scan(&depth, &rows); err != nil {
				t.Fatal(err)
			}
			if depth != rows {
				t.Fatalf("%s: queue %s depth %d, %d rows", step, q.Name(), depth, rows)
			}
		}
		if b, m := rawCount(t, db, "bodies"), rawCount(t, db, "messages"); b != m {
			t.Fatalf("%s: %d bodies for %d messages", step, b, m)
		}
	}
	for i := range 40 {
		mustPut(t, q, "x", queue.PutOptions{TTL: time.Duration(i+1) * time.Second})
		mustPut(t, other, "y", queue.PutOptions{})
	}
	check("put")
	// Concurrent Puts to both queues share commits (groups of mixed
	// queues); then they go again.
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range 25 {
				target := []*queue.Queue{q, other}[g%2]
				if _, err := target.Put(ctx, []byte("z"), queue.PutOptions{}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	check("concurrent puts")
	if err := q.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		mustPut(t, q, "x", queue.PutOptions{TTL: time.Duration(i+1) * time.Second})
		mustPut(t, other, "y", queue.PutOptions{})
	}
	ms := mustGet(t, q, 5, time.Minute)
	if err := q.Delete(ctx, ms[0].ID, ms[0].PopReceipt); err != nil {
		t.Fatal(err)
	}
	check("delete")
	rs := []queue.Receipt{{ID: ms[1].ID, PopReceipt: ms[1].PopReceipt}, {ID: ms[2].ID, PopReceipt: "0000000000000000"}, {ID: "999"}}
	if _, err := q.DeleteBatch(ctx, rs); err != nil {
		t.Fatal(err)
	}
	check("delete batch")
	c.Advance(20 * time.Second)
	// TTLs 1 … 40 s, those of 1 and 2 s deleted: at 20 s, 18 are expired
	// (still in the file) and 20 live.
	if n, err := q.Count(ctx); err != nil || n != 20 {
		t.Fatalf("Count with expired messages = %d, %v; want 20", n, err)
	}
	mustGet(t, q, 1, time.Minute) // purges
	check("purge")
	if err := q.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	check("clear")
	if n, _ := other.Count(ctx); n != 40 {
		t.Fatalf("Count(other) = %d after Clear of another queue", n)
	}
}

// TestVacuumGivesSpaceBack drains a queue of large bodies and checks that
// the vacuum gives the free pages back to the file system.
func TestVacuumGivesSpaceBack(t *testing.T) {
	db, _, path := newDB(t)
	q := mustQueue(t, db, "big")
	body := make([]byte, 16<<10)
	for range 600 { // ~10 MiB
		if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	size := func() int64 {
		var pages int64
		db.w.QueryRow("PRAGMA page_count").Scan(&pages)
		return pages
	}
	peak := size()
	for {
		ms := mustGet(t, q, 32, time.Minute)
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			if err := q.Delete(ctx, m.ID, m.PopReceipt); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := db.vacuum(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := size(); got*10 > peak {
		t.Fatalf("after the drain and a vacuum the file has %d pages of its peak %d", got, peak)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > peak*4096/10 {
		t.Fatalf("the file is %d bytes after the vacuum's checkpoint; peak %d pages", fi.Size(), peak)
	}
	// The checkpoint truncates the WAL; the DB's own loop (or a reader's
	// snapshot on a busy machine) may have written a few pages since, but
	// the drain's pages are gone from it too.
	if fi, err := os.Stat(path + "-wal"); err != nil {
		t.Fatal(err)
	} else if fi.Size() > peak*4096/10 {
		t.Fatalf("the WAL is %d bytes after the vacuum's checkpoint; peak %d pages", fi.Size(), peak)
	}
	// Still a working queue.
	mustPut(t, q, "after", queue.PutOptions{})
	if ms := mustGet(t, q, 1, time.Minute); bodies(ms) != "after" {
		t.Fatalf("got %q after the vacuum", bodies(ms))
	}
}

func TestSyncFull(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want int // PRAGMA synchronous: 1 NORMAL, 2 FULL
	}{{"?queue=orders", 1}, {"?queue=orders&sync=normal", 1}, {"?queue=orders&sync=full", 2}} {
		u := "sqlite://" + filepath.Join(t.TempDir(), "s.db") + tc.url
		qq, err := queue.Open(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		var db *DB
		if !qq.As(&db) {
			t.Fatal("As(*DB) failed")
		}
		var got int
		if err := db.w.QueryRow("PRAGMA synchronous").Scan(&got); err != nil || got != tc.want {
			t.Errorf("%s: synchronous = %d, %v; want %d", tc.url, got, err, tc.want)
		}
		if d, want := qq.Features().Durability, map[int]driver.Durability{1: driver.ProcessCrash, 2: driver.PowerLoss}[tc.want]; d != want {
			t.Errorf("%s: Features().Durability = %v, want %v", tc.url, d, want)
		}
		if _, err := qq.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
			t.Error(err)
		}
		qq.Close()
	}
}

func TestVacuumWorthIt(t *testing.T) {
	for _, tc := range []struct {
		pages, free int64
		busy, want  bool
	}{
		{100, 60, false, false},       // too little to bother
		{10_000, 4_000, false, false}, // mostly in use: the next puts reuse it
		{10_000, 5_000, false, true},  // half free, quiet
		{10_000, 5_000, true, false},  // half free, being drained: wait
		{10_000, 9_000, true, true},   // nine tenths free: little left to move
	} {
		if got := vacuumWorthIt(tc.pages, tc.free, tc.busy); got != tc.want {
			t.Errorf("vacuumWorthIt(%d, %d, busy %v) = %v, want %v", tc.pages, tc.free, tc.busy, got, tc.want)
		}
	}
}

// TestGetWorksOnTheWriterAlone: a Get reads its bodies in its own write
// transaction, on the writer, and opens no read connection. A read
// connection drops its page cache and unmaps the file whenever the writer
// wrote since its last read, so a Get that read its bodies there (as one
// did from f60470d to issue 34) paid for a cold cache on every call: at
// 200-byte bodies 3.4 µs of the 11.5 µs a Get cost per message, and a
// munmap per Get.
func TestGetWorksOnTheWriterAlone(t *testing.T) {
	db, _, _ := newDB(t)
	q := mustQueue(t, db, "writer")
	for _, b := range []string{"a", "b", "c"} {
		mustPut(t, q, b, queue.PutOptions{})
	}
	// Close the read pool: a Get that reads there fails.
	if err := db.r.Close(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 2 {
		for _, m := range mustGet(t, q, 2, time.Minute) {
			got = append(got, string(m.Body))
		}
	}
	if strings.Join(got, ",") != "a,b,c" {
		t.Fatalf("got %v, want a,b,c", got)
	}
}

// TestGetCopiesEachBodyOnce: a Get allocates its bodies once. Scanning a
// BLOB into *[]byte makes database/sql clone the copy the driver already
// made, so a Get of 32 bodies of 64 KiB allocated 4 MiB, and the clone
// was a third of a 64 KiB drain's memmove (issue 34).
func TestGetCopiesEachBodyOnce(t *testing.T) {
	db, _, _ := newDB(t)
	q := mustQueue(t, db, "large")
	body := make([]byte, 64<<10)
	for i := range body {
		body[i] = byte(i % 251)
	}
	for range 64 {
		if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mustGet(t, q, 32, time.Minute) // warm up: statements, caches
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ms := mustGet(t, q, 32, time.Minute)
	runtime.ReadMemStats(&after)
	if len(ms) != 32 {
		t.Fatalf("got %d messages, want 32", len(ms))
	}
	bodies := uint64(32 * len(body))
	if got := after.TotalAlloc - before.TotalAlloc; got > bodies*3/2 {
		t.Fatalf("a Get of 32 bodies of 64 KiB allocated %d bytes, want at most 1.5× the bodies (%d)", got, bodies*3/2)
	}
}

// TestGotBodiesAreTheirOwn: the bodies a Get returns stay intact through
// later Gets, Puts and Deletes (a Get keeps the driver's copy of each body;
// this fails if a driver update makes it reuse that memory).
func TestGotBodiesAreTheirOwn(t *testing.T) {
	db, _, _ := newDB(t)
	q := mustQueue(t, db, "own")
	for i := range 8 {
		mustPut(t, q, strings.Repeat(string(rune('a'+i)), 100+i), queue.PutOptions{})
	}
	first := mustGet(t, q, 4, time.Minute)
	for i := range 8 {
		mustPut(t, q, strings.Repeat(string(rune('A'+i)), 100+i), queue.PutOptions{})
	}
	for {
		ms := mustGet(t, q, 4, time.Minute)
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			if err := q.Delete(ctx, m.ID, m.PopReceipt); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, m := range first {
		if want := strings.Repeat(string(rune('a'+i)), 100+i); string(m.Body) != want {
			t.Fatalf("body %d is %q, want %q", i, m.Body, want)
		}
	}
}

// TestDeleteBatchOfOneGet: the receipts of one Get (one receipt shared,
// deleted with sqlDeleteBatchOne) are told apart as with receipts of
// several: the current one deletes, one that a renewal replaced is stale,
// one whose message is gone is not found.
func TestDeleteBatchOfOneGet(t *testing.T) {
	db, _, _ := newDB(t)
	q := mustQueue(t, db, "one-get")
	for _, b := range []string{"a", "b", "c", "d"} {
		mustPut(t, q, b, queue.PutOptions{})
	}
	ms := mustGet(t, q, 4, time.Minute)
	if len(ms) != 4 || ms[0].PopReceipt != ms[3].PopReceipt {
		t.Fatalf("got %d messages; want 4 sharing one receipt", len(ms))
	}
	renewed, err := q.UpdateVisibility(ctx, ms[1].ID, ms[1].PopReceipt, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Delete(ctx, ms[2].ID, ms[2].PopReceipt); err != nil {
		t.Fatal(err)
	}
	var rs []queue.Receipt
	for _, m := range ms {
		rs = append(rs, queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
	}
	res, err := q.DeleteBatch(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	if res[0] != nil || res[3] != nil {
		t.Errorf("current receipts: %v, %v; want nil", res[0], res[3])
	}
	if !errors.Is(res[1], queue.ErrReceiptMismatch) {
		t.Errorf("the renewed message's old receipt: %v, want ErrReceiptMismatch", res[1])
	}
	if !errors.Is(res[2], queue.ErrNotFound) {
		t.Errorf("the deleted message: %v, want ErrNotFound", res[2])
	}
	if n, err := q.Count(ctx); err != nil || n != 1 {
		t.Fatalf("Count = %d, %v; want 1 (b)", n, err)
	}
	if err := q.Delete(ctx, ms[1].ID, renewed); err != nil {
		t.Fatalf("b with its renewed receipt: %v", err)
	}
}
