package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
)

var ctx = context.Background()

// newDB opens a database file in a fresh directory on a fake clock.
func newDB(t *testing.T, opts ...Option) (*DB, *clock.Fake, string) {
	t.Helper()
	c := clock.NewFake(clock.Epoch)
	path := filepath.Join(t.TempDir(), "q.db")
	db, err := Open(path, append([]Option{WithClock(c)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, c, path
}

func mustQueue(t *testing.T, db *DB, name string) *queue.Queue {
	t.Helper()
	q, err := db.Queue(name)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func mustPut(t *testing.T, q *queue.Queue, body string, opts queue.PutOptions) string {
	t.Helper()
	id, err := q.Put(ctx, []byte(body), opts)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func mustGet(t *testing.T, q *queue.Queue, n int, vis time.Duration) []*queue.Message {
	t.Helper()
	ms, err := q.Get(ctx, n, vis)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func bodies(ms []*queue.Message) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = string(m.Body)
	}
	return strings.Join(s, ",")
}

// rawCount counts the rows of a table, expired messages included.
func rawCount(t *testing.T, db *DB, table string) int {
	t.Helper()
	var n int
	if err := db.r.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestOpenCreatesDirectoryAndSchema(t *testing.T) {
	// Characters a file: URI must escape, in a directory that does not exist.
	path := filepath.Join(t.TempDir(), "a b", "c?d#e%f&g", "q.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	var version, appID int
	var mode string
	db.w.QueryRow("PRAGMA user_version").Scan(&version)
	db.w.QueryRow("PRAGMA application_id").Scan(&appID)
	db.w.QueryRow("PRAGMA journal_mode").Scan(&mode)
	if version != schemaVersion || appID != applicationID || mode != "wal" {
		t.Fatalf("user_version %d, application_id %#x, journal_mode %s; want %d, %#x, wal", version, appID, mode, schemaVersion, applicationID)
	}
	if db.Path() != path {
		t.Errorf("Path() = %q, want %q", db.Path(), path)
	}
}

func TestDeleteBatchClassesCoverMaxBatch(t *testing.T) {
	if 1<<(deleteBatchClasses-1) != queue.MaxBatchSize {
		t.Fatalf("largest delete batch statement holds %d pairs, MaxBatchSize is %d", 1<<(deleteBatchClasses-1), queue.MaxBatchSize)
	}
	for k := 1; k <= queue.MaxBatchSize; k++ {
		if _, size := (&DB{}).deleteBatchStmt(k); size < k || size >= 2*k {
			t.Errorf("batch of %d uses the statement for %d", k, size)
		}
	}
}

func TestInvalidNameCreatesNothing(t *testing.T) {
	db, _, _ := newDB(t)
	for _, name := range []string{"", "ab", "Orders", "a_b"} {
		_, err := db.Queue(name)
		if !errors.Is(err, queue.ErrInvalidName) {
			t.Fatalf("Queue(%q) = %v, want ErrInvalidName", name, err)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", name)) {
			t.Errorf("error %q does not name %q", err, name)
		}
	}
	if n := rawCount(t, db, "queues"); n != 0 {
		t.Fatalf("invalid names created %d queues", n)
	}
	mustQueue(t, db, "orders")
	mustQueue(t, db, "orders")
	if n := rawCount(t, db, "queues"); n != 1 {
		t.Fatalf("two handles on one name made %d queues", n)
	}
}

func TestIDsNeverReused(t *testing.T) {
	db, _, _ := newDB(t)
	q := mustQueue(t, db, "ids")
	seen := map[string]bool{}
	fresh := func(id string) {
		t.Helper()
		if seen[id] {
			t.Fatalf("id %s handed out twice", id)
		}
		seen[id] = true
	}
	var last string
	for i := range 3 {
		last = mustPut(t, q, fmt.Sprint(i), queue.PutOptions{})
		fresh(last)
	}
	// Delete the newest message: a plain rowid table would reuse its id.
	for _, m := range mustGet(t, q, 3, time.Minute) {
		if m.ID == last {
			if err := q.Delete(ctx, m.ID, m.PopReceipt); err != nil {
				t.Fatal(err)
			}
		}
	}
	fresh(mustPut(t, q, "after delete of the newest", queue.PutOptions{}))
	if err := q.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	fresh(mustPut(t, q, "after clear", queue.PutOptions{}))
	// Nor across a reopen.
	other := mustQueue(t, db, "ids-other")
	fresh(mustPut(t, other, "other queue", queue.PutOptions{}))
}

func TestGetFIFOOrder(t *testing.T) {
	db, c, _ := newDB(t)
	q := mustQueue(t, db, "fifo")
	for _, b := range []string{"a", "b", "c", "d"} {
		mustPut(t, q, b, queue.PutOptions{})
		c.Advance(time.Millisecond)
	}
	// Take a and b, then release a later than c and d were put, and b
	// later still: FIFO by visibility time puts them last, in that order.
	ms := mustGet(t, q, 2, time.Minute)
	if got := bodies(ms); got != "a,b" {
		t.Fatalf("Get(2) = %s, want a,b", got)
	}
	c.Advance(time.Second)
	if _, err := q.UpdateVisibility(ctx, ms[0].ID, ms[0].PopReceipt, 0); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Second)
	if _, err := q.UpdateVisibility(ctx, ms[1].ID, ms[1].PopReceipt, 0); err != nil {
		t.Fatal(err)
	}
	if ps, err := q.Peek(ctx, 32); err != nil || bodies(ps) != "c,d,a,b" {
		t.Fatalf("Peek = %s, %v; want c,d,a,b", bodies(ps), err)
	}
	if got := bodies(mustGet(t, q, 32, time.Minute)); got != "c,d,a,b" {
		t.Fatalf("Get(32) = %s, want c,d,a,b", got)
	}

	// A full batch of messages put at one instant comes back by id.
	q2 := mustQueue(t, db, "fifo-same-time")
	var want []string
	for i := range 40 {
		want = append(want, mustPut(t, q2, fmt.Sprintf("m%02d", i), queue.PutOptions{}))
	}
	ms = mustGet(t, q2, 32, time.Minute)
	for i, m := range ms {
		if m.ID != want[i] {
			t.Fatalf("Get(32)[%d] = %s, want %s", i, m.ID, want[i])
		}
	}
}

func TestMessageFields(t *testing.T) {
	db, c, _ := newDB(t)
	q := mustQueue(t, db, "fields")
	t0 := c.Now()
	mustPut(t, q, "ttl", queue.PutOptions{TTL: time.Hour})
	mustPut(t, q, "forever", queue.PutOptions{TTL: queue.NoExpiry})
	mustPut(t, q, "huge-ttl", queue.PutOptions{TTL: time.Duration(1<<63 - 1)})
	c.Advance(time.Second)
	ms := mustGet(t, q, 3, 30*time.Second)
	if len(ms) != 3 {
		t.Fatalf("Get(3) = %d", len(ms))
	}
	if !ms[0].InsertedAt.Equal(t0) || !ms[0].ExpiresAt.Equal(t0.Add(time.Hour)) || !ms[0].NextVisibleAt.Equal(t0.Add(31*time.Second)) {
		t.Errorf("times = %s, %s, %s", ms[0].InsertedAt, ms[0].ExpiresAt, ms[0].NextVisibleAt)
	}
	if !ms[1].ExpiresAt.IsZero() {
		t.Errorf("NoExpiry message has ExpiresAt %s, want the zero time", ms[1].ExpiresAt)
	}
	if !ms[2].ExpiresAt.IsZero() && ms[2].ExpiresAt.Before(t0.AddDate(200, 0, 0)) {
		t.Errorf("a ttl past the int64 horizon expires at %s", ms[2].ExpiresAt)
	}
	for _, m := range ms {
		if len(m.PopReceipt) != 16 {
			t.Errorf("receipt %q is not 16 hex digits", m.PopReceipt)
		}
	}
}

func TestExpiredMessagesArePurged(t *testing.T) {
	db, c, _ := newDB(t)
	q := mustQueue(t, db, "purge")
	n := purgeLimit + 44
	for i := range n {
		mustPut(t, q, fmt.Sprint(i), queue.PutOptions{TTL: time.Minute})
	}
	keep := mustPut(t, q, "keep", queue.PutOptions{TTL: time.Hour})
	c.Advance(2 * time.Minute)
	if cnt, _ := q.Count(ctx); cnt != 1 {
		t.Fatalf("Count = %d with %d expired messages, want 1", cnt, n)
	}
	if rawCount(t, db, "messages") != n+1 {
		t.Fatal("expired messages vanished before any Get")
	}
	// The first Get purges a full batch and skips the rest; the next one
	// purges again at once because the first was full.
	ms := mustGet(t, q, 1, time.Minute)
	if len(ms) != 1 || ms[0].ID != keep {
		t.Fatalf("Get = %v, want only the unexpired message", bodies(ms))
	}
	if got := rawCount(t, db, "messages"); got != n+1-purgeLimit {
		t.Fatalf("after one Get %d rows remain, want %d", got, n+1-purgeLimit)
	}
	mustGet(t, q, 1, time.Minute)
	if got := rawCount(t, db, "messages"); got != 1 {
		t.Fatalf("after two Gets %d rows remain, want 1", got)
	}
}

func TestDeleteBatchEdgeCases(t *testing.T) {
	db, c, _ := newDB(t)
	q := mustQueue(t, db, "batch-edges")
	for i := range 40 {
		mustPut(t, q, fmt.Sprint(i), queue.PutOptions{})
	}
	ms := append(mustGet(t, q, 32, time.Second), mustGet(t, q, 8, time.Second)...)
	if len(ms) != 40 {
		t.Fatalf("got %d", len(ms))
	}
	// 40 receipts (more than one statement's worth) plus malformed ones.
	rs := make([]queue.Receipt, 0, 44)
	for _, m := range ms {
		rs = append(rs, queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
	}
	rs = append(rs,
		queue.Receipt{ID: "not-an-id", PopReceipt: ms[0].PopReceipt},
		queue.Receipt{ID: "0" + ms[0].ID, PopReceipt: ms[0].PopReceipt},
		queue.Receipt{ID: "999999", PopReceipt: ms[0].PopReceipt},
	)
	res, err := q.DeleteBatch(ctx, rs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if res[i] != nil {
			t.Fatalf("result %d = %v", i, res[i])
		}
	}
	for i := 40; i < len(rs); i++ {
		if !errors.Is(res[i], queue.ErrNotFound) {
			t.Errorf("result for %q = %v, want ErrNotFound", rs[i].ID, res[i])
		}
	}

	// The same id twice: one receipt stale, one current, as two Deletes
	// in a row would see them.
	mustPut(t, q, "dup", queue.PutOptions{})
	m1 := mustGet(t, q, 1, time.Second)[0]
	c.Advance(2 * time.Second)
	m2 := mustGet(t, q, 1, time.Minute)[0]
	res, err = q.DeleteBatch(ctx, []queue.Receipt{
		{ID: m1.ID, PopReceipt: m1.PopReceipt},
		{ID: m2.ID, PopReceipt: m2.PopReceipt},
		{ID: m2.ID, PopReceipt: m2.PopReceipt},
		{ID: m2.ID, PopReceipt: "garbage"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[0], queue.ErrReceiptMismatch) || res[1] != nil || !errors.Is(res[2], queue.ErrNotFound) || !errors.Is(res[3], queue.ErrNotFound) {
		t.Fatalf("duplicate-id batch = %v", res)
	}

	// A malformed receipt on a live message is a mismatch.
	mustPut(t, q, "live", queue.PutOptions{})
	m := mustGet(t, q, 1, time.Minute)[0]
	res, err = q.DeleteBatch(ctx, []queue.Receipt{{ID: m.ID, PopReceipt: "zz"}})
	if err != nil || !errors.Is(res[0], queue.ErrReceiptMismatch) {
		t.Fatalf("malformed receipt = %v, %v; want ErrReceiptMismatch", res, err)
	}
	if err := q.Delete(ctx, m.ID, "zz"); !errors.Is(err, queue.ErrReceiptMismatch) {
		t.Fatalf("Delete with a malformed receipt = %v", err)
	}
	if !strings.Contains(res[0].Error(), `"batch-edges"`) {
		t.Errorf("error %q does not name the queue", res[0])
	}
}

func TestErrorsNameTheQueue(t *testing.T) {
	db, _, _ := newDB(t)
	q := mustQueue(t, db, "named")
	_, err := q.Get(ctx, 33, time.Second)
	if !errors.Is(err, queue.ErrBatchSize) || !strings.Contains(err.Error(), `sqlite: get "named"`) {
		t.Fatalf("Get(33) = %v", err)
	}
	err = q.Delete(ctx, "123", "0000000000000000")
	if !errors.Is(err, queue.ErrNotFound) || !strings.Contains(err.Error(), `sqlite: delete "named"`) {
		t.Fatalf("Delete = %v", err)
	}
}

func TestBusyIsTransient(t *testing.T) {
	db, _, path := newDB(t, WithBusyTimeout(50*time.Millisecond))
	q := mustQueue(t, db, "busy")
	// Another connection (as another process would) holds the write lock.
	other, err := sql.Open("sqlite", dsn(path, "0", SyncNormal, false))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.Begin() // BEGIN IMMEDIATE
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = q.Put(ctx, []byte("x"), queue.PutOptions{})
	if err == nil {
		t.Fatal("Put succeeded while another connection held the write lock")
	}
	if !queue.IsTransient(err) || !strings.Contains(err.Error(), `"busy"`) {
		t.Fatalf("Put under a held lock = %v, want a transient error naming the queue", err)
	}
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Errorf("gave up after %s, before the 50ms busy timeout", d)
	}
	_, err = q.Get(ctx, 1, time.Second)
	if !queue.IsTransient(err) {
		t.Fatalf("Get under a held lock = %v, want transient", err)
	}
	// Reads go on beside the writer (WAL).
	if _, err := q.Count(ctx); err != nil {
		t.Fatalf("Count beside a writer: %v", err)
	}
	tx.Rollback()
	if _, err := q.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
		t.Fatalf("Put after the lock was released: %v", err)
	}
}

func TestClose(t *testing.T) {
	db, _, _ := newDB(t)
	a := mustQueue(t, db, "close-a")
	b := mustQueue(t, db, "close-a")
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Count(ctx); !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("Count on a closed handle = %v", err)
	}
	if _, err := b.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
		t.Fatalf("closing one handle closed the DB: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"Put":    func() error { _, err := b.Put(ctx, nil, queue.PutOptions{}); return err }(),
		"Get":    func() error { _, err := b.Get(ctx, 1, time.Second); return err }(),
		"Delete": b.Delete(ctx, "1", "x"),
		"Peek":   func() error { _, err := b.Peek(ctx, 1); return err }(),
		"Clear":  b.Clear(ctx),
	} {
		if !errors.Is(err, queue.ErrClosed) {
			t.Errorf("%s after DB.Close = %v, want ErrClosed", name, err)
		}
	}
	if _, err := db.Queue("close-b"); !errors.Is(err, queue.ErrClosed) {
		t.Errorf("Queue after DB.Close = %v", err)
	}
	if err := db.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestRestart: a message got but not deleted stays hidden across a reopen
// until its visibility timeout, then reappears with dequeue count 2.
func TestRestart(t *testing.T) {
	c := clock.NewFake(clock.Epoch)
	path := filepath.Join(t.TempDir(), "restart.db")
	open := func() (*DB, *queue.Queue) {
		db, err := Open(path, WithClock(c))
		if err != nil {
			t.Fatal(err)
		}
		return db, mustQueue(t, db, "restart")
	}
	db, q := open()
	id := mustPut(t, q, "work", queue.PutOptions{})
	m := mustGet(t, q, 1, time.Minute)[0]
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	c.Advance(59 * time.Second)
	db, q = open()
	if ms := mustGet(t, q, 1, time.Minute); len(ms) != 0 {
		t.Fatal("the held message reappeared before its timeout")
	}
	if n, err := q.Count(ctx); err != nil || n != 1 {
		t.Fatalf("Count after reopen = %d, %v; want 1", n, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	c.Advance(2 * time.Second)
	db, q = open()
	defer db.Close()
	ms := mustGet(t, q, 1, time.Minute)
	if len(ms) != 1 || ms[0].ID != id || ms[0].DequeueCount != 2 {
		t.Fatalf("after the timeout got %+v; want %s with dequeue count 2", ms, id)
	}
	if err := q.Delete(ctx, m.ID, m.PopReceipt); !errors.Is(err, queue.ErrReceiptMismatch) {
		t.Fatalf("the first receipt after redelivery: %v, want ErrReceiptMismatch", err)
	}
}

func TestSchemaVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "future.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.w.Exec("PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = Open(path)
	if !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("Open of a version-99 file = %v, want ErrSchemaTooNew", err)
	}
	for _, want := range []string{"99", fmt.Sprint(schemaVersion), path} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	// Reopening a current file migrates nothing and keeps the data.
	path = filepath.Join(t.TempDir(), "current.db")
	db, _ = Open(path)
	mustPut(t, mustQueue(t, db, "keep"), "x", queue.PutOptions{})
	db.Close()
	db, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if n, _ := mustQueue(t, db, "keep").Count(ctx); n != 1 {
		t.Fatalf("reopen lost the message: count %d", n)
	}
}

func TestForeignDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec("CREATE TABLE t (x); PRAGMA user_version = 3"); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	if _, err := Open(path); !errors.Is(err, ErrNotAdaptq) {
		t.Fatalf("Open of another application's file = %v, want ErrNotAdaptq", err)
	}
}

func TestMaxBodySize(t *testing.T) {
	db, _, _ := newDB(t, WithMaxBodySize(10))
	q := mustQueue(t, db, "small")
	if q.MaxBodySize() != 10 {
		t.Fatalf("MaxBodySize = %d", q.MaxBodySize())
	}
	if _, err := q.Put(ctx, make([]byte, 11), queue.PutOptions{}); !errors.Is(err, queue.ErrTooLarge) {
		t.Fatalf("Put of 11 bytes = %v", err)
	}
}

// TestConcurrentPutsShareCommits puts from many goroutines, some of which
// give up while waiting in line: every id returned is stored, once, and
// nothing else is.
func TestConcurrentPutsShareCommits(t *testing.T) {
	db, _, _ := newDB(t)
	q := mustQueue(t, db, "group")
	var (
		mu  sync.Mutex
		ids = map[string]bool{}
		wg  sync.WaitGroup
	)
	cancelled := 0
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				cctx, cancel := context.WithCancel(ctx)
				if (g+i)%5 == 0 {
					go cancel() // give up at some point while waiting
				}
				id, err := q.Put(cctx, []byte(fmt.Sprintf("%d-%d", g, i)), queue.PutOptions{})
				cancel()
				mu.Lock()
				switch {
				case err == nil:
					if ids[id] {
						t.Errorf("id %s returned twice", id)
					}
					ids[id] = true
				case errors.Is(err, context.Canceled):
					cancelled++
				default:
					t.Error(err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	rows, err := db.r.Query("SELECT id FROM messages")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	stored := 0
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		stored++
		if !ids[fmt.Sprint(id)] {
			t.Errorf("message %d is stored but its Put returned an error", id)
		}
	}
	if stored != len(ids) {
		t.Fatalf("%d messages stored, %d Puts succeeded", stored, len(ids))
	}
	t.Logf("%d puts stored, %d gave up", stored, cancelled)
	if len(db.puts.line) != 0 {
		t.Fatalf("%d puts left in line", len(db.puts.line))
	}
}
