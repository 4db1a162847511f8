package sqlite

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue/driver"
)

// walFrames is the number of frames in the WAL of the database at path.
func walFrames(t *testing.T, path string) int {
	t.Helper()
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	const header, frame = 32, 24 + 4096
	if fi.Size() < header {
		return 0
	}
	return int((fi.Size() - header) / frame)
}

// TestGetWritesFewPages checks the pages a Get of 32 writes in a drain
// with one Get in flight: the messages rows, the head of messages_ready and
// the held messages' index, a page or two more when a leaf empties. With
// the held messages in messages_ready (schema version 3) their entries
// landed at the index's tail, beside the last messages put: whenever that
// leaf had no room for 32 more, every Get split it and every delete merged
// it again, 10–12 pages a Get (the leaves, a page allocated, the free list
// and the pointer map), depending on how full the fill left the last leaf.
// The test drains queues of several lengths, so that some leave it full.
func TestGetWritesFewPages(t *testing.T) {
	worst := 0.0
	for fill := 1000; fill < 1130; fill += 7 {
		if per := getPages(t, fill); per > worst {
			worst = per
		}
	}
	if worst > 6 {
		t.Errorf("a Get of 32 wrote %.1f pages on average in the worst drain, want at most 6", worst)
	}
}

// getPages fills a queue with fill messages of 200 bytes, then gets 32 and
// deletes them, 25 times, and returns the pages a Get wrote on average.
func getPages(t *testing.T, fill int) float64 {
	path := filepath.Join(t.TempDir(), "q.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.stopVacuum() // its checkpoints would cut the WAL under the count
	<-db.vacuumDone
	db.stopCkpt() // and so would the checkpoint loop's
	<-db.ckptDone
	db.stopVacuum = nil
	d, err := db.queue("qqq")
	if err != nil {
		t.Fatal(err)
	}
	reqs := make([]driver.PutRequest, fill)
	for i := range reqs {
		reqs[i] = driver.PutRequest{Body: make([]byte, 200), Opts: driver.PutOptions{TTL: time.Hour}}
	}
	if _, _, err := d.PutBatch(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	if _, err := db.w.Exec("PRAGMA wal_autocheckpoint = 0"); err != nil {
		t.Fatal(err)
	}
	frames := 0
	const gets = 25
	for i := range gets {
		f0 := walFrames(t, path)
		ms, err := d.Get(ctx, 32, time.Minute)
		if err != nil || len(ms) != 32 {
			t.Fatalf("Get %d: %d messages, %v", i, len(ms), err)
		}
		frames += walFrames(t, path) - f0
		rs := make([]driver.Receipt, len(ms))
		for j, m := range ms {
			rs[j] = driver.Receipt{ID: m.ID, PopReceipt: m.PopReceipt}
		}
		if _, err := d.DeleteBatch(ctx, rs); err != nil {
			t.Fatal(err)
		}
	}
	per := float64(frames) / gets
	t.Logf("fill %d: %.2f pages a Get", fill, per)
	return per
}

// TestMigrateV3 builds a file of schema version 3 by hand, with a message
// held, one released, one visible and one delayed, and checks that version
// 4 (messages_ready split by receipt into messages_ready and
// messages_held) takes them in the same order and counts them the same.
func TestMigrateV3(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v3.db")
	raw, err := sql.Open("sqlite", dsn(path, "5000", SyncNormal, false))
	if err != nil {
		t.Fatal(err)
	}
	raw.SetMaxOpenConns(1)
	for _, m := range migrations[:3] {
		if _, err := raw.Exec(m); err != nil {
			t.Fatal(err)
		}
	}
	e := clock.Epoch.UnixNano()
	sec := int64(time.Second)
	if _, err := raw.Exec(fmt.Sprintf(`PRAGMA application_id = %d; PRAGMA user_version = 3;
		INSERT INTO queues (id, name, created_at, depth) VALUES (1, 'qqq', %d, 4);
		INSERT INTO messages (id, queue_id, inserted_at, visible_at, expires_at, dequeue_count, receipt) VALUES
			(1, 1, %[2]d, %[2]d + 60*%[3]d, %[4]d, 1, 11), -- a: held for a minute
			(2, 1, %[2]d, %[2]d - 1, %[4]d, 1, 22),        -- b: released
			(3, 1, %[2]d, %[2]d, %[4]d, 0, NULL),          -- c: visible, never got
			(4, 1, %[2]d, %[2]d + 10*%[3]d, %[4]d, 0, NULL); -- d: put with a delay of 10 s
		INSERT INTO bodies (id, body) VALUES (1, x'61'), (2, x'62'), (3, x'63'), (4, x'64');`,
		applicationID, e, sec, int64(noExpiry))); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	c := clock.NewFake(clock.Epoch)
	db, err := Open(path, WithClock(c))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var version int
	db.w.QueryRow("PRAGMA user_version").Scan(&version)
	var idx string
	db.w.QueryRow("SELECT group_concat(name) FROM (SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'messages' ORDER BY name)").Scan(&idx)
	if version != 4 || idx != "messages_expiry,messages_held,messages_ready" {
		t.Fatalf("after migration: user_version %d, indexes %s", version, idx)
	}
	q := mustQueue(t, db, "qqq")
	dq, err := db.queue("qqq")
	if err != nil {
		t.Fatal(err)
	}
	dep, err := dq.Depth(ctx)
	if err != nil || dep.Visible != 2 || dep.InFlight != 2 {
		t.Fatalf("Depth = %+v, %v; want 2 visible (b, c), 2 hidden (a, d)", dep, err)
	}
	if ps, err := q.Peek(ctx, 32); err != nil || bodies(ps) != "b,c" {
		t.Fatalf("Peek = %q, %v; want b,c", bodies(ps), err)
	}
	if err := q.Delete(ctx, "1", "000000000000000b"); err != nil {
		t.Fatalf("Delete of a with its v3 receipt: %v", err)
	}
	if ms := mustGet(t, q, 32, time.Minute); bodies(ms) != "b,c" || ms[0].DequeueCount != 2 || ms[1].DequeueCount != 1 {
		t.Fatalf("Get = %q %+v; want b (got twice), c (once)", bodies(ms), ms)
	}
	c.Advance(2 * time.Minute)
	if ms := mustGet(t, q, 32, time.Minute); bodies(ms) != "d,b,c" {
		// d became visible at +10 s, b and c at +1 min.
		t.Fatalf("Get 2 min later = %q; want d,b,c", bodies(ms))
	}
	if n, err := q.Count(ctx); err != nil || n != 3 {
		t.Fatalf("Count = %d, %v; want 3", n, err)
	}
}
