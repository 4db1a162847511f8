package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
)

// Adversarial review of schema version 4 (messages_ready split by receipt
// into two partial indexes, issue 34).

// queryPlan is the EXPLAIN QUERY PLAN of stmt on conn, one detail a line.
func queryPlan(t *testing.T, conn *sql.DB, stmt string, args ...any) string {
	t.Helper()
	rows, err := conn.Query("EXPLAIN QUERY PLAN "+stmt, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

// TestV4PlansMergeBothIndexes checks, through modernc.org/sqlite itself,
// that Get and Peek merge ordered walks of messages_ready and messages_held
// (no temporary B-tree: a sort would read every visible message for a Get
// of 32) and that Depth counts from both, on a file with statistics
// (ANALYZE, as PRAGMA optimize would leave) and messages in both indexes.
func TestV4PlansMergeBothIndexes(t *testing.T) {
	t.Parallel()
	db, c, _ := newDB(t)
	q := mustQueue(t, db, "plans")
	for i := range 300 {
		mustPut(t, q, fmt.Sprint(i), queue.PutOptions{})
	}
	mustGet(t, q, 32, time.Second) // visible again below: messages_held
	c.Advance(2 * time.Second)
	mustGet(t, q, 32, time.Minute)
	if _, err := db.w.Exec("ANALYZE"); err != nil {
		t.Fatal(err)
	}
	now := c.Now().UnixNano()
	for _, tc := range []struct {
		name string
		conn *sql.DB
		stmt string
		args []any
	}{
		{"Get", db.w, sqlGetSelect, []any{1, now, 32}},
		{"Peek", db.r, sqlPeek, []any{1, now, 32}},
	} {
		p := queryPlan(t, tc.conn, tc.stmt, tc.args...)
		for _, want := range []string{"MERGE (UNION ALL)",
			"SEARCH m USING INDEX messages_ready (queue_id=? AND visible_at<?)",
			"SEARCH m USING INDEX messages_held (queue_id=? AND visible_at<?)"} {
			if !strings.Contains(p, want) {
				t.Errorf("%s's plan lacks %q:\n%s", tc.name, want, p)
			}
		}
		if strings.Contains(p, "TEMP B-TREE") || strings.Contains(p, "SCAN") {
			t.Errorf("%s's plan sorts or scans:\n%s", tc.name, p)
		}
	}
	p := queryPlan(t, db.r, sqlDepthRead, 1, now)
	for _, want := range []string{"USING INDEX messages_ready (queue_id=? AND visible_at>?)",
		"USING INDEX messages_held (queue_id=? AND visible_at>?)"} {
		if !strings.Contains(p, want) {
			t.Errorf("Depth's plan lacks %q:\n%s", want, p)
		}
	}
}

// writeV3 writes a file of schema version 3 at path, as adaptq wrote it,
// with queue "qqq" (id 1) holding: a held for a minute, b released, c
// visible and never got, d delayed 10 s, e expired and held, f expired
// and never got. Its clock is clock.Epoch.
func writeV3(t *testing.T, path string) {
	t.Helper()
	raw, err := sql.Open("sqlite", dsn(path, "5000", SyncNormal, false))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetMaxOpenConns(1)
	for _, m := range migrations[:3] {
		if _, err := raw.Exec(m); err != nil {
			t.Fatal(err)
		}
	}
	e, sec := clock.Epoch.UnixNano(), int64(time.Second)
	if _, err := raw.Exec(fmt.Sprintf(`PRAGMA application_id = %d; PRAGMA user_version = 3;
		INSERT INTO queues (id, name, created_at, depth) VALUES (1, 'qqq', %d, 6);
		INSERT INTO messages (id, queue_id, inserted_at, visible_at, expires_at, dequeue_count, receipt) VALUES
			(1, 1, %[2]d, %[2]d + 60*%[3]d, %[4]d, 1, 11),
			(2, 1, %[2]d, %[2]d - 1, %[4]d, 1, 22),
			(3, 1, %[2]d, %[2]d, %[4]d, 0, NULL),
			(4, 1, %[2]d, %[2]d + 10*%[3]d, %[4]d, 0, NULL),
			(5, 1, %[2]d, %[2]d - 2, %[2]d, 3, 33),
			(6, 1, %[2]d, %[2]d - 3, %[2]d - 1, 0, NULL);
		INSERT INTO bodies (id, body) VALUES (1, x'61'), (2, x'62'), (3, x'63'), (4, x'64'), (5, x'65'), (6, x'66');`,
		applicationID, e, sec, int64(noExpiry))); err != nil {
		t.Fatal(err)
	}
}

// checkV3Migrated checks the queue of writeV3 after the migration.
func checkV3Migrated(t *testing.T, db *DB, c *clock.Fake) {
	t.Helper()
	var version int
	var idx, ok string
	db.w.QueryRow("PRAGMA user_version").Scan(&version)
	db.w.QueryRow(`SELECT group_concat(name || ':' || sql, ' | ') FROM (SELECT name, sql FROM sqlite_schema
		WHERE type = 'index' AND tbl_name = 'messages' ORDER BY name)`).Scan(&idx)
	db.w.QueryRow("PRAGMA integrity_check").Scan(&ok)
	if version != 4 || ok != "ok" || strings.Count(idx, "messages_") != 6 ||
		!strings.Contains(idx, "messages_held:") || !strings.Contains(idx, "WHERE receipt IS NULL") ||
		!strings.Contains(idx, "WHERE receipt IS NOT NULL") {
		t.Fatalf("after migration: user_version %d, integrity %q, indexes %s", version, ok, idx)
	}
	q := mustQueue(t, db, "qqq")
	if n, err := q.Count(ctx); err != nil || n != 4 {
		t.Fatalf("Count = %d, %v; want 4 (e and f expired)", n, err)
	}
	if ps, err := q.Peek(ctx, 32); err != nil || bodies(ps) != "b,c" {
		t.Fatalf("Peek = %q, %v; want b,c", bodies(ps), err)
	}
	if err := q.Delete(ctx, "5", formatReceipt(33)); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Delete of expired e: %v, want ErrNotFound", err)
	}
	if ms := mustGet(t, q, 32, time.Minute); bodies(ms) != "b,c" || ms[0].DequeueCount != 2 || ms[1].DequeueCount != 1 {
		t.Fatalf("Get = %q; want b (got twice), c (once)", bodies(ms))
	}
	if err := q.Delete(ctx, "1", formatReceipt(11)); err != nil {
		t.Fatalf("Delete of a with its v3 receipt: %v", err)
	}
	c.Advance(2 * time.Minute)
	if ms := mustGet(t, q, 32, time.Minute); bodies(ms) != "d,b,c" {
		t.Fatalf("Get 2 min later = %q; want d,b,c", bodies(ms))
	}
	if n := rawCount(t, db, "messages"); n != 3 {
		t.Fatalf("%d rows in messages; want 3 (the expired ones purged)", n)
	}
}

// TestMigrateV4IsOneStep makes the version 4 step fail at its last
// statement (an object already named messages_held) and checks that the
// file is left as version 3 wrote it: version 3, the full messages_ready,
// the statements of version 3 working. Then the migration goes through.
func TestMigrateV4IsOneStep(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "v3.db")
	writeV3(t, path)
	raw, err := sql.Open("sqlite", dsn(path, "5000", SyncNormal, false))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec("CREATE TABLE messages_held (x)"); err != nil {
		t.Fatal(err)
	}
	c := clock.NewFake(clock.Epoch)
	if db, err := Open(path, WithClock(c)); err == nil || !strings.Contains(err.Error(), "schema version 3 to 4") {
		if db != nil {
			db.Close()
		}
		t.Fatalf("Open with the step blocked: %v, want a failure of step 3 to 4", err)
	}
	var version int
	var ready string
	raw.QueryRow("PRAGMA user_version").Scan(&version)
	raw.QueryRow("SELECT sql FROM sqlite_schema WHERE name = 'messages_ready'").Scan(&ready)
	if version != 3 || strings.Contains(ready, "WHERE") {
		t.Fatalf("after a failed step: user_version %d, messages_ready %q; want 3 and the full index", version, ready)
	}
	// Version 3's Get statement (main before schema 4) still plans.
	v3Get := `SELECT m.id FROM messages AS m INDEXED BY messages_ready JOIN bodies AS b ON b.id = m.id
		WHERE m.queue_id = ?1 AND m.visible_at <= ?2 AND m.expires_at > ?2 ORDER BY m.visible_at, m.id LIMIT ?3`
	var n int
	if err := raw.QueryRow("SELECT count(*) FROM ("+v3Get+")", 1, clock.Epoch.UnixNano(), 32).Scan(&n); err != nil || n != 2 {
		t.Fatalf("version 3's Get after the failed step: %d rows, %v; want 2", n, err)
	}
	if _, err := raw.Exec("DROP TABLE messages_held"); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	db, err := Open(path, WithClock(c))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkV3Migrated(t, db, c)
}

// TestMigrateV3ConcurrentOpens opens one version 3 file from several DBs
// at once (each its own connections and locks, as processes): one
// migrates, the others wait for its commit and find version 4; every Open
// succeeds and nothing is lost, doubled or reordered.
func TestMigrateV3ConcurrentOpens(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "v3.db")
	writeV3(t, path)
	c := clock.NewFake(clock.Epoch)
	const openers = 4
	dbs := make([]*DB, openers)
	errs := make([]error, openers)
	var wg sync.WaitGroup
	for i := range openers {
		wg.Go(func() { dbs[i], errs[i] = Open(path, WithClock(c)) })
	}
	wg.Wait()
	for i := range openers {
		if errs[i] != nil {
			t.Fatalf("Open %d: %v", i, errs[i])
		}
		defer dbs[i].Close()
	}
	checkV3Migrated(t, dbs[openers-1], c)
	// The others see the same queue through their own connections.
	if ms := mustGet(t, mustQueue(t, dbs[0], "qqq"), 32, time.Minute); len(ms) != 0 {
		t.Fatalf("another DB got %q after all were held", bodies(ms))
	}
}

// TestV3ProcessFailsLoudlyOnV4 is a process of the previous build that has
// the file open (its statements prepared) when this build migrates it: its
// Get, Peek and Depth name messages_ready without the partial index's
// condition, and must then fail ("no query solution") rather than read a
// part of the queue. Stop older processes before the first Open by this
// build.
func TestV3ProcessFailsLoudlyOnV4(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "v3.db")
	writeV3(t, path)
	old, err := sql.Open("sqlite", dsn(path, "5000", SyncNormal, false))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	old.SetMaxOpenConns(1)
	v3Get, err := old.Prepare(`SELECT m.id FROM messages AS m INDEXED BY messages_ready JOIN bodies AS b ON b.id = m.id
		WHERE m.queue_id = ?1 AND m.visible_at <= ?2 AND m.expires_at > ?2 ORDER BY m.visible_at, m.id LIMIT ?3`)
	if err != nil {
		t.Fatal(err)
	}
	count := func() (int, error) {
		rows, err := v3Get.Query(1, clock.Epoch.UnixNano(), 32)
		if err != nil {
			return 0, err
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			n++
		}
		return n, rows.Err()
	}
	if n, err := count(); err != nil || n != 2 {
		t.Fatalf("version 3's Get before the migration: %d, %v; want 2", n, err)
	}
	db, err := Open(path, WithClock(clock.NewFake(clock.Epoch)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if n, err := count(); err == nil || !strings.Contains(err.Error(), "no query solution") {
		t.Fatalf("version 3's Get on the migrated file: %d rows, %v; want the error no query solution", n, err)
	}
}

// TestTwoProcessesMigrateAndConsume starts two processes at once on a
// version 3 file of n visible messages, half never got (messages_ready
// after the migration) and half released (messages_held), interleaved in
// order: one process migrates while the other waits for the write lock,
// then both drain. Every message is consumed exactly once.
func TestTwoProcessesMigrateAndConsume(t *testing.T) {
	const n = 2000
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
	// Real time: the children read the system clock.
	now := time.Now().Add(-time.Minute).UnixNano()
	if _, err := raw.Exec(fmt.Sprintf(`PRAGMA application_id = %d; PRAGMA user_version = 3;
		INSERT INTO queues (id, name, created_at, depth) VALUES (1, '%s', %d, %d);
		WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < %[4]d)
		INSERT INTO messages (id, queue_id, inserted_at, visible_at, expires_at, dequeue_count, receipt)
			SELECT i, 1, %[3]d, %[3]d + i, %[5]d, i %% 2, CASE i %% 2 WHEN 0 THEN NULL ELSE i END FROM r;
		INSERT INTO bodies (id, body) SELECT id, CAST(id AS BLOB) FROM messages;`,
		applicationID, helperQueue, now, n, int64(noExpiry))); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	seen := [2]map[string]int{{}, {}}
	var g sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		cmd, out := child(t, "consume", path, 0)
		g.Go(func() {
			if err := readIDs(out, func(id string) { seen[i][id]++ }); err != nil {
				errs[i] = err
				return
			}
			errs[i] = cmd.Wait()
		})
	}
	g.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
	}
	for id := 1; id <= n; id++ {
		s := fmt.Sprint(id)
		if seen[0][s]+seen[1][s] != 1 {
			t.Errorf("message %s consumed %d + %d times", s, seen[0][s], seen[1][s])
		}
	}
	if len(seen[0])+len(seen[1]) != n {
		t.Fatalf("consumed %d + %d, want %d", len(seen[0]), len(seen[1]), n)
	}
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var version int
	db.w.QueryRow("PRAGMA user_version").Scan(&version)
	if c, err := mustQueue(t, db, helperQueue).Count(ctx); err != nil || c != 0 || version != 4 {
		t.Fatalf("after the drain: Count %d, %v; user_version %d", c, err, version)
	}
	t.Logf("consumed %d and %d", len(seen[0]), len(seen[1]))
}
