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

func TestURLErrors(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		url  string
		want error
	}{
		{"postgres://u@127.0.0.1:1/db", queue.ErrInvalidURL},                 // no queue
		{"postgres://u@127.0.0.1:1/db?queue=a&queue=b", queue.ErrInvalidURL}, // twice
		{"postgres://u@127.0.0.1:1/db?queue=Bad_Name", queue.ErrInvalidName}, // name rules
		{"postgres://u@127.0.0.1:1/db?queue=orders&schema=Bad-Schema", queue.ErrInvalidURL},
		{"postgres://u@127.0.0.1:1/db?queue=orders&migrate=perhaps", queue.ErrInvalidURL},
		{"postgres://u@127.0.0.1:1/db?queue=orders&notify_interval=5", queue.ErrInvalidURL},
		{"postgres://u@127.0.0.1:1/db?queue=orders&max_body=-1", queue.ErrInvalidURL},
		{"postgres://u@127.0.0.1:1/db?queue=orders&pool_max_conns=many", queue.ErrInvalidURL},  // pgx's
		{"postgres://u@127.0.0.1:1/db?queue=orders&shema=jobs", queue.ErrInvalidURL},           // a typo
		{"postgres://u@127.0.0.1:1/db?queue=orders&statement_timeout=5s", queue.ErrInvalidURL}, // a server setting: options=-c …
	} {
		_, err := queue.Open(ctx, c.url)
		if !errors.Is(err, c.want) {
			t.Errorf("Open(%q) = %v, want %v", c.url, err, c.want)
		}
	}
	// A password never shows in the error.
	_, err := queue.Open(ctx, "postgres://u:s3cret@127.0.0.1:1/db?queue=Bad_Name")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error shows the password: %v", err)
	}
}

// TestURLSharesDB: queues opened by URL with the same connection share one
// DB (one pool, one LISTEN connection), which closes with the last of
// them; siblings share it too; postgresql:// is the same scheme.
func TestURLSharesDB(t *testing.T) {
	schema := pgtest.Schema(t)
	ctx := context.Background()
	a, err := queue.Open(ctx, pgtest.QueueURL(t, schema, "orders", "pool_max_conns=4&max_body=1000"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := queue.Open(ctx, pgtest.QueueURL(t, schema, "invoices", "pool_max_conns=4&max_body=1000"))
	if err != nil {
		t.Fatal(err)
	}
	var da, dbb *postgres.DB
	if !a.As(&da) || !b.As(&dbb) {
		t.Fatal("As(*postgres.DB) failed")
	}
	if da != dbb {
		t.Fatal("two queues of one URL opened two DBs")
	}
	if got := a.Features().MaxBody; got != 1000 {
		t.Fatalf("max_body=1000: MaxBody %d", got)
	}
	if da.Pool().Config().MaxConns != 4 {
		t.Fatalf("pool_max_conns=4: %d", da.Pool().Config().MaxConns)
	}
	s, err := a.Sibling(ctx, "orders-poison")
	if err != nil {
		t.Fatal(err)
	}
	_ = a.Close()
	_ = b.Close()
	// The sibling keeps the DB open.
	if _, err := s.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
		t.Fatalf("Put on a sibling after its parents closed: %v", err)
	}
	_ = s.Close()
	if _, err := da.Queue(ctx, "orders"); !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("the DB outlived its last queue: %v", err)
	}
	alt, err := queue.Open(ctx, strings.Replace(pgtest.QueueURL(t, schema, "orders", ""), "postgres://", "postgresql://", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer alt.Close()
	if n, err := alt.Count(ctx); err != nil || n != 0 {
		t.Fatalf("postgresql:// Count = %d, %v", n, err)
	}
}

// TestCountAtDepth: Count stays exact through puts, gets, deletes, a
// clear and concurrent producers; it reads 16 counter rows, not the
// messages.
func TestCountAtDepth(t *testing.T) {
	schema := pgtest.Schema(t)
	db := openDB(t, schema)
	ctx := context.Background()
	q, err := db.Queue(ctx, "depth")
	if err != nil {
		t.Fatal(err)
	}
	putMany(t, q, 1000)
	if n, err := q.Count(ctx); err != nil || n != 1000 {
		t.Fatalf("Count = %d, %v; want 1000", n, err)
	}
	ms, err := q.Get(ctx, 32, 30e9)
	if err != nil {
		t.Fatal(err)
	}
	rs := make([]queue.Receipt, len(ms))
	for i, m := range ms {
		rs[i] = queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt}
	}
	if _, err := q.DeleteBatch(ctx, rs); err != nil {
		t.Fatal(err)
	}
	if n, err := q.Count(ctx); err != nil || n != 968 {
		t.Fatalf("Count = %d, %v; want 968", n, err)
	}
	if err := q.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := q.Count(ctx); err != nil || n != 0 {
		t.Fatalf("Count after Clear = %d, %v", n, err)
	}
}

// TestVacuum: the DB vacuums its tables by itself after WithVacuumEvery
// dead rows, and Vacuum does it on demand.
func TestVacuum(t *testing.T) {
	schema := pgtest.Schema(t)
	db := openDB(t, schema, postgres.WithVacuumEvery(100))
	ctx := context.Background()
	q, err := db.Queue(ctx, "vac")
	if err != nil {
		t.Fatal(err)
	}
	putMany(t, q, 200)
	for {
		ms, err := q.Get(ctx, 32, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			break
		}
		rs := make([]queue.Receipt, len(ms))
		for i, m := range ms {
			rs[i] = queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt}
		}
		if _, err := q.DeleteBatch(ctx, rs); err != nil {
			t.Fatal(err)
		}
	}
	admin, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	waitFor(t, hang, "a vacuum of messages", func() bool {
		var n int64
		_ = admin.QueryRow(ctx, `SELECT vacuum_count FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'messages'`, schema).Scan(&n)
		return n > 0
	})
	if err := db.Vacuum(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestURLAsyncLeases: async_leases=true opens a DB of its own (its
// statements differ), and a value that is not a boolean is refused,
// naming the parameter.
func TestURLAsyncLeases(t *testing.T) {
	schema := pgtest.Schema(t)
	ctx := context.Background()
	plain, err := queue.Open(ctx, pgtest.QueueURL(t, schema, "leases", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	async, err := queue.Open(ctx, pgtest.QueueURL(t, schema, "leases", "async_leases=true"))
	if err != nil {
		t.Fatal(err)
	}
	defer async.Close()
	var a, b *postgres.DB
	if !plain.As(&a) || !async.As(&b) || a == b {
		t.Fatalf("async_leases=true shares the DB of a plain URL")
	}
	_, err = queue.Open(ctx, pgtest.QueueURL(t, schema, "leases", "async_leases=sometimes"))
	if !errors.Is(err, queue.ErrInvalidURL) || !strings.Contains(err.Error(), "async_leases") {
		t.Fatalf("async_leases=sometimes: %v", err)
	}
}

// TestURLServerSettings: a URL sets the server's settings through options
// (libpq's), and application_name; pgx's pool parameters stay pgx's.
func TestURLServerSettings(t *testing.T) {
	schema := pgtest.Schema(t)
	ctx := context.Background()
	q, err := queue.Open(ctx, pgtest.QueueURL(t, schema, "orders", "options=-c%20statement_timeout%3D4321&application_name=adaptq-settings&pool_max_conns=3"))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var db *postgres.DB
	if !q.As(&db) {
		t.Fatal("As(*postgres.DB) failed")
	}
	var timeout, app string
	if err := db.Pool().QueryRow(ctx, "SELECT current_setting('statement_timeout'), current_setting('application_name')").Scan(&timeout, &app); err != nil {
		t.Fatal(err)
	}
	if timeout != "4321ms" || app != "adaptq-settings" {
		t.Errorf("statement_timeout %q, application_name %q; want 4321ms, adaptq-settings", timeout, app)
	}
	if n := db.Pool().Config().MaxConns; n != 3 {
		t.Errorf("pool_max_conns=3 gave a pool of %d", n)
	}
}
