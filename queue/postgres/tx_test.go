package postgres_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
	"github.com/adaptq/adaptq/scaling"
)

// txFixture is a DB on a fresh schema with a queue "work" and an
// application table orders(id, note, msg_id) in the same schema.
type txFixture struct {
	url, schema string
	db          *postgres.DB
	q           *queue.Queue
	orders      string // quoted table name
}

func newTxFixture(t *testing.T, opts ...postgres.Option) *txFixture {
	t.Helper()
	return newTxFixtureURL(t, "", opts...)
}

// newTxFixtureURL is newTxFixture with pgx parameters (k=v&…) added to
// the DB's connection string.
func newTxFixtureURL(t *testing.T, params string, opts ...postgres.Option) *txFixture {
	t.Helper()
	ctx := context.Background()
	base := pgtest.URL(t)
	u := base
	if params != "" {
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		u += sep + params
	}
	schema := pgtest.Schema(t)
	db, err := postgres.Open(ctx, u, append([]postgres.Option{postgres.WithSchema(schema)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	q, err := db.Queue(ctx, "work")
	if err != nil {
		t.Fatal(err)
	}
	f := &txFixture{url: base, schema: schema, db: db, q: q, orders: pgx.Identifier{schema, "orders"}.Sanitize()}
	if _, err := db.Pool().Exec(ctx, `CREATE TABLE `+f.orders+` (id bigserial PRIMARY KEY, note text NOT NULL, msg_id text)`); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *txFixture) count(t *testing.T, where string) int {
	t.Helper()
	var n int
	if err := f.db.Pool().QueryRow(context.Background(), `SELECT count(*) FROM `+f.orders+` WHERE `+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// listen is a LISTEN connection of the test's own on the DB's channel:
// notifications arrive in commit order, so a marker notified after a
// rolled-back put proves that put sent none.
func (f *txFixture) listen(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	if _, err := c.Exec(ctx, `LISTEN `+pgx.Identifier{"adaptq:" + f.schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return c
}

func nextNotification(t *testing.T, c *pgx.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard only
	defer cancel()
	n, err := c.WaitForNotification(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return n.Payload
}

// TestPutTxRollback: a put in a transaction that rolls back leaves no
// message and sends no notification; nothing is visible before the commit.
func TestPutTxRollback(t *testing.T) {
	f := newTxFixture(t)
	ctx := context.Background()
	lc := f.listen(t)
	tx, err := f.db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+f.orders+` (note) VALUES ('rolled back')`); err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.PutTx(ctx, tx, f.q, []byte("order"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.q.Count(ctx); n != 0 {
		t.Fatalf("Count before the commit = %d, want 0", n)
	}
	if ms, _ := f.q.Get(ctx, 1, time.Minute); len(ms) != 0 {
		t.Fatalf("Get before the commit found %d messages", len(ms))
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Pool().Exec(ctx, `SELECT pg_notify($1, 'marker')`, "adaptq:"+f.schema); err != nil {
		t.Fatal(err)
	}
	if p := nextNotification(t, lc); p != "marker" {
		t.Fatalf("first notification after the rollback is %q, want the marker: the rolled-back put notified", p)
	}
	if n, _ := f.q.Count(ctx); n != 0 {
		t.Fatalf("Count after the rollback = %d, want 0", n)
	}
	if ms, _ := f.q.Peek(ctx, 32); len(ms) != 0 {
		t.Fatalf("Peek after the rollback found %d messages", len(ms))
	}
	if n := f.count(t, "true"); n != 0 {
		t.Fatalf("%d order rows after the rollback", n)
	}
}

// TestPutTxCommit: committed, the message is visible with its row, and
// the consumers' Subscribe wakes; the notification leaves at the commit.
func TestPutTxCommit(t *testing.T) {
	f := newTxFixture(t)
	ctx := context.Background()
	lc := f.listen(t)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub, err := f.q.Subscribe(sctx)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := f.db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	var orderID int64
	if err := tx.QueryRow(ctx, `INSERT INTO `+f.orders+` (note) VALUES ('committed') RETURNING id`).Scan(&orderID); err != nil {
		t.Fatal(err)
	}
	id, err := postgres.PutTx(ctx, tx, f.q, []byte(strconv.FormatInt(orderID, 10)), queue.PutOptions{Metadata: map[string]string{"tenant": "t1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Pool().Exec(ctx, `SELECT pg_notify($1, 'marker')`, "adaptq:"+f.schema); err != nil {
		t.Fatal(err)
	}
	if p := nextNotification(t, lc); p != "marker" {
		t.Fatalf("a notification (%q) left before the commit", p)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if p := nextNotification(t, lc); p != "work" {
		t.Fatalf("notification after the commit = %q, want the queue's name", p)
	}
	select {
	case <-sub:
	case <-time.After(30 * time.Second): // a hang guard only
		t.Fatal("Subscribe did not wake after the commit")
	}
	ms, err := f.q.Get(ctx, 1, time.Minute)
	if err != nil || len(ms) != 1 || ms[0].ID != id || string(ms[0].Body) != strconv.FormatInt(orderID, 10) || ms[0].Metadata["tenant"] != "t1" {
		t.Fatalf("Get after the commit = %v, %v; want message %s", ms, err, id)
	}
	if n := f.count(t, "id = "+strconv.FormatInt(orderID, 10)); n != 1 {
		t.Fatalf("order row count %d", n)
	}
}

// TestPutTxChecks: the portable checks apply, and nothing is written.
func TestPutTxChecks(t *testing.T) {
	f := newTxFixture(t, postgres.WithMaxBodySize(8))
	ctx := context.Background()
	tx, err := f.db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := postgres.PutTx(ctx, tx, f.q, []byte("123456789"), queue.PutOptions{}); !errors.Is(err, queue.ErrTooLarge) {
		t.Fatalf("body over the limit: %v, want ErrTooLarge", err)
	}
	if _, err := postgres.PutTx(ctx, tx, f.q, nil, queue.PutOptions{TTL: -time.Second}); !errors.Is(err, queue.ErrInvalidArgument) || !strings.Contains(err.Error(), "ttl") {
		t.Fatalf("negative ttl: %v, want ErrInvalidArgument naming ttl", err)
	}
	if _, err := postgres.PutTx(ctx, nil, f.q, nil, queue.PutOptions{}); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("nil tx: %v", err)
	}
	// The failed checks sent nothing: the transaction is still usable.
	if _, err := postgres.PutTx(ctx, tx, f.q, []byte("ok"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestPutTxOtherDatabase: a transaction on another database is refused
// with ErrOtherDatabase, which aborts it: no stray message is committed,
// whether that database lacks the schema or has one whose queue ids
// differ.
func TestPutTxOtherDatabase(t *testing.T) {
	f := newTxFixture(t)
	ctx := context.Background()
	other := strings.Replace(f.url, "/test?", "/postgres?", 1)
	if other == f.url {
		t.Skip("cannot name another database in " + f.url)
	}
	pool, err := pgxpool.New(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	try := func(what string) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		_, err = postgres.PutTx(ctx, tx, f.q, []byte("x"), queue.PutOptions{})
		if !errors.Is(err, postgres.ErrOtherDatabase) {
			t.Fatalf("%s: PutTx = %v, want ErrOtherDatabase", what, err)
		}
		if err := tx.Commit(ctx); err == nil {
			t.Fatalf("%s: the transaction committed after the refused put", what)
		}
	}
	try("no schema there")
	// The same schema on the other database, where id 1 is another queue.
	db2, err := postgres.Open(ctx, other, postgres.WithSchema(f.schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db2.Close(); _ = pgtest.Drop(other, f.schema) })
	if _, err := db2.Queue(ctx, "another"); err != nil {
		t.Fatal(err)
	}
	try("the schema there, with other queues")
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{f.schema, "messages"}.Sanitize()).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the other database holds %d messages (%v)", n, err)
	}
}

// TestPutSQLTx: the database/sql form over pgx's stdlib driver, commit and
// rollback.
func TestPutSQLTx(t *testing.T) {
	f := newTxFixture(t)
	ctx := context.Background()
	sdb := stdlib.OpenDBFromPool(f.db.Pool())
	defer sdb.Close()
	for _, commit := range []bool{false, true} {
		tx, err := sdb.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+f.orders+` (note) VALUES ($1)`, fmt.Sprint(commit)); err != nil {
			t.Fatal(err)
		}
		if _, err := postgres.PutSQLTx(ctx, tx, f.q, []byte(fmt.Sprint(commit)), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	ms, err := f.q.Peek(ctx, 32)
	if err != nil || len(ms) != 1 || string(ms[0].Body) != "true" {
		t.Fatalf("Peek = %v, %v; want the committed message only", ms, err)
	}
	if f.count(t, "true") != 1 || f.count(t, "note = 'true'") != 1 {
		t.Fatal("want the committed order row only")
	}
	// Settle with database/sql too.
	got, err := f.q.Get(ctx, 1, time.Minute)
	if err != nil || len(got) != 1 {
		t.Fatal(got, err)
	}
	tx, err := sdb.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.DeleteSQLTx(ctx, tx, f.q, got[0]); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.q.Count(ctx); n != 0 {
		t.Fatalf("Count after the settle = %d", n)
	}
}

// handleInTx is a handler's transaction: an order row for m, and m's
// delete, committed together unless rollback.
func (f *txFixture) handleInTx(ctx context.Context, m *queue.Message, rollback bool) error {
	tx, err := f.db.Pool().Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `INSERT INTO `+f.orders+` (note, msg_id) VALUES ('handled', $1)`, m.ID); err != nil {
		return err
	}
	if err := postgres.DeleteTx(ctx, tx, f.q, m); err != nil {
		return err
	}
	if rollback {
		return errors.New("rolled back on purpose")
	}
	return tx.Commit(ctx)
}

// TestDeleteTx: the delete and the handler's row commit together; rolled
// back, the message is still there, held with the same receipt, and is
// delivered again; a stale receipt fails the delete with
// ErrReceiptMismatch.
func TestDeleteTx(t *testing.T) {
	f := newTxFixture(t)
	ctx := context.Background()
	id, err := f.q.Put(ctx, []byte("a"), queue.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := f.q.Get(ctx, 1, time.Minute)
	if err != nil || len(ms) != 1 {
		t.Fatal(ms, err)
	}
	if err := f.handleInTx(ctx, ms[0], true); err == nil {
		t.Fatal("want the rollback's error")
	}
	if n := f.count(t, "true"); n != 0 {
		t.Fatalf("%d rows after the rollback", n)
	}
	// Still held with its receipt: release it and get it again.
	if _, err := f.q.UpdateVisibility(ctx, id, ms[0].PopReceipt, 0); err != nil {
		t.Fatalf("the rolled-back delete left no message held with its receipt: %v", err)
	}
	again, err := f.q.Get(ctx, 1, time.Minute)
	if err != nil || len(again) != 1 || again[0].ID != id || again[0].DequeueCount != 2 {
		t.Fatalf("redelivery = %v, %v", again, err)
	}
	// The first receipt is stale now.
	stale := f.handleInTx(ctx, ms[0], false)
	if !errors.Is(stale, queue.ErrReceiptMismatch) {
		t.Fatalf("stale receipt: %v, want ErrReceiptMismatch", stale)
	}
	if err := f.handleInTx(ctx, again[0], false); err != nil {
		t.Fatal(err)
	}
	if n := f.count(t, "msg_id = '"+id+"'"); n != 1 {
		t.Fatalf("%d rows for the message, want 1", n)
	}
	if n, _ := f.q.Count(ctx); n != 0 {
		t.Fatalf("Count = %d after the settle", n)
	}
	if err := f.q.Delete(ctx, id, again[0].PopReceipt); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Delete after the settle: %v, want ErrNotFound", err)
	}
}

// TestListenerSettleInTx: run by a listener, a handler that settles its
// message in its own transaction is counted as processed and deleted, and
// the listener deletes nothing itself (no NotFound); a handler whose
// transaction rolls back gets the message again.
func TestListenerSettleInTx(t *testing.T) {
	// The DB and the listener share a fake clock: no lease ends by wall
	// time (a 500 ms visibility on the real clock could run out, under
	// load, in a handler that then committed). The rolled-back wait out
	// their visibility when the test moves the clock, once nothing is in
	// flight; vis is far beyond what tickShort moves it while handlers run.
	fc := clock.NewFake(time.Now())
	f := newTxFixture(t, postgres.WithClock(fc))
	ctx := context.Background()
	const n, vis, short = 20, 24 * time.Hour, 10 * time.Millisecond
	for i := range n {
		if _, err := f.q.Put(ctx, []byte(strconv.Itoa(i)), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var runs sync.Map // id → runs
	var done atomic.Int64
	h := func(ctx context.Context, m *queue.Message) error {
		c, _ := runs.LoadOrStore(m.ID, new(atomic.Int64))
		k := c.(*atomic.Int64).Add(1)
		i, _ := strconv.Atoi(string(m.Body))
		err := f.handleInTx(ctx, m, i%2 == 0 && k == 1) // even bodies roll back once
		if err == nil {
			done.Add(1)
		}
		return err
	}
	l, err := listener.New(f.q, h, listener.Options{Tasks: 1, MinTasks: 1, MaxTasks: 1, BatchSize: 8,
		VisibilityTimeout: vis, Clock: fc, Idle: scaling.IdleBackoff{Max: short},
		RetryDelay: func(*queue.Message, error) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	tickShort(t, fc, short)
	go func() { errc <- l.Run(rctx) }()
	// Every first run ends (the odd commit, the even roll back and fail)
	// with no lease ended; then nothing is in flight, and the clock moves
	// past the rolled-back's visibility.
	waitFor(t, 60*time.Second, "every first run", func() bool {
		st := l.Stats()
		return st.Processed == n/2 && st.Failed == n/2
	})
	if st := l.Stats(); done.Load() != n/2 || st.ReceiptMismatches != 0 || st.NotFound != 0 {
		t.Fatalf("first runs: %d committed, mismatches %d notFound %d", done.Load(), st.ReceiptMismatches, st.NotFound)
	}
	fc.Advance(vis)
	waitFor(t, 60*time.Second, "every message handled", func() bool { return done.Load() == n })
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	st := l.Stats()
	if st.Processed != n || st.Deleted != n || st.NotFound != 0 || st.ReceiptMismatches != 0 || st.Failed != n/2 {
		t.Fatalf("stats: processed %d deleted %d notFound %d mismatches %d failed %d; want %d, %d, 0, 0, %d",
			st.Processed, st.Deleted, st.NotFound, st.ReceiptMismatches, st.Failed, n, n, n/2)
	}
	if c := f.count(t, "true"); c != n {
		t.Fatalf("%d order rows, want %d", c, n)
	}
	if c, _ := f.q.Count(ctx); c != 0 {
		t.Fatalf("Count = %d", c)
	}
}

// tickShort moves c to each timer due within short of its time, until the
// test ends: the listener's pacing, trigger floor and idle sleeps (all
// within short) run in virtual time, while a lease (far longer) never
// ends by it. The polling only lets the woken goroutines move; no outcome
// depends on its pace.
func tickShort(t *testing.T, c *clock.Fake, short time.Duration) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if next, ok := c.NextDeadline(); ok {
				if d := next.Sub(c.Now()); d <= short {
					c.Advance(max(d, 0)) // fires only what is due within d
				}
			}
			time.Sleep(100 * time.Microsecond)
		}
	})
	t.Cleanup(func() { close(done); wg.Wait() })
}

// lostLeaseCount is how many messages TestSettleInTxLostLease runs:
// ADAPTQ_TX_LOST_LEASE_N (the 10,000), else 1,000 to keep make
// test fast.
func lostLeaseCount() int {
	if n, err := strconv.Atoi(os.Getenv("ADAPTQ_TX_LOST_LEASE_N")); err == nil && n > 0 {
		return n
	}
	return 1000
}

// TestSettleInTxLostLease: concurrent consumers whose leases expire in the
// middle of their handlers (the DB's fake clock jumps past the visibility
// timeout, and the jumping consumer steals messages held by the others)
// never write a message's row twice: the loser's delete fails with
// ErrReceiptMismatch (or ErrNotFound, the winner settled first) and its
// transaction rolls back.
func TestSettleInTxLostLease(t *testing.T) {
	fc := clock.NewFake(time.Now())
	// Each consumer holds a connection for its transaction and may take
	// another for a Get inside it: more connections than consumers × 2,
	// or the pool runs dry and every consumer waits for another.
	f := newTxFixtureURL(t, "pool_max_conns=12", postgres.WithClock(fc))
	ctx := context.Background()
	n := lostLeaseCount()
	tx, err := f.db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := postgres.PutTx(ctx, tx, f.q, []byte(strconv.Itoa(i)), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	const vis = time.Second
	var lost, settled atomic.Int64
	handle := func(rng *rand.Rand, m *queue.Message, steal func()) error {
		tx, err := f.db.Pool().Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		if _, err := tx.Exec(ctx, `INSERT INTO `+f.orders+` (note, msg_id) VALUES ('h', $1)`, m.ID); err != nil {
			return err
		}
		if rng.IntN(4) == 0 {
			fc.Advance(2 * vis) // every lease held now ends mid-handler
			steal()
		}
		switch err := postgres.DeleteTx(ctx, tx, f.q, m); {
		case errors.Is(err, queue.ErrReceiptMismatch), errors.Is(err, queue.ErrNotFound):
			// Taken by another consumer (and maybe settled by it already).
			lost.Add(1)
			return nil // rolled back: the new holder writes the row
		case err != nil:
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		settled.Add(1)
		return nil
	}
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 30))
			var stolen []*queue.Message
			steal := func() {
				ms, err := f.q.Get(ctx, 4, vis)
				if err != nil {
					errc <- err
				}
				stolen = append(stolen, ms...)
			}
			for settled.Load() < int64(n) {
				ms := stolen
				stolen = nil
				if len(ms) == 0 {
					var err error
					if ms, err = f.q.Get(ctx, 8, vis); err != nil {
						errc <- err
						return
					}
				}
				if len(ms) == 0 {
					fc.Advance(2 * vis) // what is left is held by rolled-back losers
					continue
				}
				for _, m := range ms {
					if err := handle(rng, m, steal); err != nil {
						errc <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	var rows, distinct int
	if err := f.db.Pool().QueryRow(ctx, `SELECT count(*), count(DISTINCT msg_id) FROM `+f.orders).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != n || distinct != n {
		t.Fatalf("%d rows for %d distinct messages, want %d each", rows, distinct, n)
	}
	if c, _ := f.q.Count(ctx); c != 0 {
		t.Fatalf("Count = %d", c)
	}
	if lost.Load() == 0 {
		t.Fatal("no lease was lost: the test did not test the lost-lease case")
	}
	t.Logf("%d messages, %d deletes found their lease lost and rolled back", n, lost.Load())
}

// The crash tests run this test binary again (TestHelperTxChild, switched
// on by txChildEnv = "mode url schema"): it writes an order row and puts a
// message in one transaction, commits it or not (mode), prints "ready"
// and waits to be killed.
const txChildEnv = "ADAPTQ_PG_TX_CHILD"

func TestHelperTxChild(t *testing.T) {
	v := os.Getenv(txChildEnv)
	if v == "" {
		t.Skip("the child process of the crash tests")
	}
	if err := runTxChild(strings.Fields(v)); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	select {} // killed by the parent
}

func runTxChild(args []string) error {
	mode, u, schema := args[0], args[1], args[2]
	ctx := context.Background()
	db, err := postgres.Open(ctx, u, postgres.WithSchema(schema))
	if err != nil {
		return err
	}
	q, err := db.Queue(ctx, "work")
	if err != nil {
		return err
	}
	tx, err := db.Pool().Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "orders"}.Sanitize()+` (note) VALUES ('crash')`); err != nil {
		return err
	}
	if _, err := postgres.PutTx(ctx, tx, q, []byte("crash"), queue.PutOptions{}); err != nil {
		return err
	}
	if mode == "commit" {
		if err := tx.Commit(ctx); err != nil {
			return err
		}
	}
	fmt.Println("ready")
	return nil
}

// TestPutTxCrash: a process killed (SIGKILL) between its data write and
// its commit leaves neither the row nor the message; killed after the
// commit, both.
func TestPutTxCrash(t *testing.T) {
	for _, mode := range []string{"open", "commit"} {
		t.Run(mode, func(t *testing.T) {
			f := newTxFixture(t)
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperTxChild$")
			cmd.Env = append(os.Environ(), txChildEnv+"="+mode+" "+f.url+" "+f.schema)
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(out)
			ready := false
			for sc.Scan() {
				if sc.Text() == "ready" {
					ready = true
					break
				}
			}
			if !ready {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatal("the child ended before it was ready")
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			// The server ends the dead client's session (and rolls back
			// its transaction) when it sees the socket closed.
			ctx := context.Background()
			want := 0
			if mode == "commit" {
				want = 1
			}
			waitFor(t, 30*time.Second, "the killed session to end", func() bool {
				var k int
				_ = f.db.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%' AND datname = current_database() AND query LIKE '%pg_notify%'`).Scan(&k)
				return k == 0
			})
			if n := f.count(t, "true"); n != want {
				t.Fatalf("%d order rows, want %d", n, want)
			}
			ms, err := f.q.Peek(ctx, 32)
			if err != nil || len(ms) != want {
				t.Fatalf("Peek = %d messages (%v), want %d", len(ms), err, want)
			}
		})
	}
}

var _ = sql.ErrNoRows

// TestPutTxWatchedCommit: puts inside a notify interval do not notify
// themselves; the round that watches them waits for their transactions,
// and notifies after a commit, not for a rollback.
func TestPutTxWatchedCommit(t *testing.T) {
	f := newTxFixture(t, postgres.WithNotifyInterval(10*time.Second))
	ctx := context.Background()
	lc := f.listen(t)
	begin := func() pgx.Tx {
		tx, err := f.db.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		if _, err := postgres.PutTx(ctx, tx, f.q, []byte("w"), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	marker := func(p string) {
		if _, err := f.db.Pool().Exec(ctx, `SELECT pg_notify($1, $2)`, "adaptq:"+f.schema, p); err != nil {
			t.Fatal(err)
		}
	}
	roundWaits := func() {
		waitFor(t, 30*time.Second, "the watch round to wait for the transactions", func() bool {
			var k int
			_ = f.db.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%ON CONFLICT (id) DO NOTHING%'`).Scan(&k)
			return k > 0
		})
	}
	expect := func(want ...string) {
		for _, w := range want {
			if p := nextNotification(t, lc); p != w {
				t.Fatalf("notification %q, want %q (in order %v)", p, w, want)
			}
		}
	}
	// The last notification 9.5 s ago: the next puts are inside the
	// interval, and their round starts within 0.5 s.
	postgres.SetNotifyAgo(f.db, "work", 9500*time.Millisecond)
	b, c := begin(), begin()
	if !postgres.Watching(f.db, "work") {
		t.Skip("the puts notified themselves (the machine stalled for 0.5 s): the watch was not exercised")
	}
	roundWaits()
	marker("m1")
	if err := c.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	marker("m2")
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	expect("m1", "m2", "work")

	postgres.SetNotifyAgo(f.db, "work", 9500*time.Millisecond)
	d := begin()
	if !postgres.Watching(f.db, "work") {
		t.Skip("the put notified itself (the machine stalled for 0.5 s)")
	}
	roundWaits()
	if err := d.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the round to end", func() bool {
		var k int
		_ = f.db.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%ON CONFLICT (id) DO NOTHING%' AND state <> 'idle' AND pid <> pg_backend_pid()`).Scan(&k)
		return k == 0
	})
	marker("m3")
	expect("m3")
}

// TestQueuePut: a whole transaction in one round trip (BEGIN, the row, the
// put, COMMIT in one batch) commits both; with ROLLBACK, neither.
func TestQueuePut(t *testing.T) {
	f := newTxFixture(t)
	ctx := context.Background()
	for _, end := range []string{"ROLLBACK", "COMMIT"} {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue(`INSERT INTO `+f.orders+` (note) VALUES ($1)`, end)
		var id string
		if err := postgres.QueuePut(ctx, b, f.q, []byte(end), queue.PutOptions{}, &id); err != nil {
			t.Fatal(err)
		}
		b.Queue(end)
		if err := f.db.Pool().SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
		if id == "" {
			t.Fatal("no id")
		}
	}
	ms, err := f.q.Peek(ctx, 32)
	if err != nil || len(ms) != 1 || string(ms[0].Body) != "COMMIT" || f.count(t, "true") != 1 || f.count(t, "note = 'COMMIT'") != 1 {
		t.Fatalf("want the committed row and message only: %v, %v", ms, err)
	}
	if err := postgres.QueuePut(ctx, &pgx.Batch{}, f.q, nil, queue.PutOptions{TTL: -2}, nil); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("bad ttl: %v", err)
	}
}

// TestPutBatchTx: a batch put in a transaction is there whole after the
// commit, in order, and not at all after a rollback; a bad body puts
// nothing.
func TestPutBatchTx(t *testing.T) {
	f := newTxFixture(t, postgres.WithMaxBodySize(8))
	ctx := context.Background()
	bodies := [][]byte{[]byte("a"), []byte("b"), []byte("c")}
	for _, commit := range []bool{false, true} {
		tx, err := f.db.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := postgres.PutBatchTx(ctx, tx, f.q, bodies, queue.PutOptions{})
		if err != nil || len(ids) != 3 || ids[0] == "" || ids[0] == ids[1] {
			t.Fatalf("PutBatchTx = %v, %v", ids, err)
		}
		if _, err := postgres.PutBatchTx(ctx, tx, f.q, [][]byte{[]byte("ok"), []byte("123456789")}, queue.PutOptions{}); !errors.Is(err, queue.ErrTooLarge) || !strings.Contains(err.Error(), "body 1") {
			t.Fatalf("a body over the limit: %v, want ErrTooLarge naming body 1", err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	ms, err := f.q.Peek(ctx, 32)
	if err != nil || len(ms) != 3 || string(ms[0].Body)+string(ms[1].Body)+string(ms[2].Body) != "abc" {
		t.Fatalf("Peek = %v, %v; want a, b, c once", ms, err)
	}
}

// TestListenerSettleTwiceInOneRun: a handler that deletes its message
// twice in its transaction gets ErrNotFound the second time, from the
// database, and the message still counts once, as settled.
func TestListenerSettleTwiceInOneRun(t *testing.T) {
	f := newTxFixture(t)
	ctx := context.Background()
	if _, err := f.q.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	h := func(ctx context.Context, m *queue.Message) error {
		tx, err := f.db.Pool().Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		if err := postgres.DeleteTx(ctx, tx, f.q, m); err != nil {
			return err
		}
		second <- postgres.DeleteTx(ctx, tx, f.q, m)
		return tx.Commit(ctx)
	}
	l, err := listener.New(f.q, h, listener.Options{Tasks: 1, MinTasks: 1, MaxTasks: 1})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- l.Run(rctx) }()
	err = <-second
	waitFor(t, 30*time.Second, "the run to be counted", func() bool { return l.Stats().Processed == 1 })
	cancel()
	<-errc
	if !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	if st := l.Stats(); st.Deleted != 1 || st.NotFound != 0 || st.LeasesLost != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestListenerSettleAfterWorkerFault: a handler whose transaction deleted
// its message and rolled back, failing for the worker's own resources,
// runs again in the same delivery; its delete then succeeds and the
// message counts once.
func TestListenerSettleAfterWorkerFault(t *testing.T) {
	f := newTxFixture(t)
	ctx := context.Background()
	if _, err := f.q.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	done := make(chan error, 2)
	h := func(ctx context.Context, m *queue.Message) error {
		tx, err := f.db.Pool().Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		err = postgres.DeleteTx(ctx, tx, f.q, m)
		if runs.Add(1) == 1 {
			if err == nil {
				_ = tx.Rollback(ctx)
				return handler.WorkerFault(errors.New("out of file descriptors"))
			}
		}
		done <- err
		if err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	l, err := listener.New(f.q, h, listener.Options{Tasks: 1, MinTasks: 1, MaxTasks: 1, ErrorBackoffInitial: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- l.Run(rctx) }()
	err = <-done
	waitFor(t, 30*time.Second, "the run to be counted", func() bool { s := l.Stats(); return s.Processed+s.Failed >= 2 })
	cancel()
	<-errc
	if err != nil {
		t.Fatalf("the delete of the run after the worker fault: %v", err)
	}
	if st := l.Stats(); st.Deleted != 1 || st.NotFound != 0 || runs.Load() != 2 {
		t.Fatalf("runs %d, stats %+v", runs.Load(), st)
	}
	if n, _ := f.q.Count(ctx); n != 0 {
		t.Fatalf("Count = %d", n)
	}
}

// TestPutTxOtherDatabaseSameQueue: a transaction on another database of
// the server, whose schema of the same name holds a queue of the same
// name at the same id (two databases set up alike: per tenant, staging),
// is refused with ErrOtherDatabase, and commits no stray message there.
func TestPutTxOtherDatabaseSameQueue(t *testing.T) {
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
	if _, err := db2.Queue(ctx, "work"); err != nil { // id 1 there too
		t.Fatal(err)
	}
	for _, batch := range []bool{false, true} {
		tx, err := db2.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if batch {
			_, err = postgres.PutBatchTx(ctx, tx, f.q, [][]byte{[]byte("x")}, queue.PutOptions{})
		} else {
			_, err = postgres.PutTx(ctx, tx, f.q, []byte("x"), queue.PutOptions{})
		}
		if !errors.Is(err, postgres.ErrOtherDatabase) {
			t.Errorf("batch %v: put = %v, want ErrOtherDatabase", batch, err)
		}
		_ = tx.Commit(ctx)
	}
	var n int
	if err := db2.Pool().QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{f.schema, "messages"}.Sanitize()).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the other database holds %d stray messages (%v)", n, err)
	}
}

// TestListenerSettledThenFailedNotPoisoned: a handler whose transaction
// deleted its message and committed, and which then fails permanently
// (a step after the commit), leaves no copy in the poison queue: the
// message left its queue with the handler's writes, and a poisoned copy
// would be replayed as a duplicate.
func TestListenerSettledThenFailedNotPoisoned(t *testing.T) {
	f := newTxFixture(t)
	ctx := context.Background()
	dead, err := f.db.Queue(ctx, "dead")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.q.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 1)
	h := func(ctx context.Context, m *queue.Message) error {
		err := f.handleInTx(ctx, m, false)
		ran <- struct{}{}
		if err != nil {
			return err
		}
		return handler.Permanent(errors.New("a step after the commit failed"))
	}
	l, err := listener.New(f.q, h, listener.Options{Tasks: 1, MinTasks: 1, MaxTasks: 1, Poison: dead})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- l.Run(rctx) }()
	<-ran
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if c := f.count(t, "true"); c != 1 {
		t.Fatalf("%d order rows, want 1", c)
	}
	if c, err := dead.Count(ctx); err != nil || c != 0 {
		t.Fatalf("the poison queue holds %d messages (%v), want 0: the handled message was poisoned", c, err)
	}
	if st := l.Stats(); st.Poisoned != 0 || st.Failed != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestPutTxWatchBehindLongTransaction: a watched put that commits wakes
// the consumers while an earlier watched put's transaction stays open
// (a long or forgotten transaction must not hold back the wake of every
// later put of its queue until it ends).
func TestPutTxWatchBehindLongTransaction(t *testing.T) {
	f := newTxFixture(t, postgres.WithNotifyInterval(10*time.Second))
	ctx := context.Background()
	lc := f.listen(t)
	begin := func() pgx.Tx {
		tx, err := f.db.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		if _, err := postgres.PutTx(ctx, tx, f.q, []byte("w"), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	postgres.SetNotifyAgo(f.db, "work", 9500*time.Millisecond)
	_ = begin() // stays open to the end of the test
	if !postgres.Watching(f.db, "work") {
		t.Skip("the put notified itself (the machine stalled for 0.5 s): the watch was not exercised")
	}
	waitFor(t, 30*time.Second, "the watch round to wait for the open transaction", func() bool {
		var k int
		_ = f.db.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%ON CONFLICT (id) DO NOTHING%'`).Scan(&k)
		return k > 0
	})
	// A notification just now: b's put is inside the interval, watched
	// too; once it has committed, the interval is made over, so that the
	// round after the one waiting starts at once.
	postgres.SetNotifyAgo(f.db, "work", 0)
	b := begin()
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	postgres.SetNotifyAgo(f.db, "work", 20*time.Second)
	if p := nextNotification(t, lc); p != "work" {
		t.Fatalf("notification %q, want work", p)
	}
	ms, err := f.q.Get(ctx, 2, time.Minute)
	if err != nil || len(ms) != 1 {
		t.Fatalf("Get = %d messages (%v), want the committed one", len(ms), err)
	}
}

// TestCloseDuringWatch: Close returns while a commit watch round waits
// for a transaction that stays open (the round's goroutine ends with it),
// and the transaction, on a pool of its own, commits its message after.
func TestCloseDuringWatch(t *testing.T) {
	f := newTxFixture(t, postgres.WithNotifyInterval(10*time.Second))
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	postgres.SetNotifyAgo(f.db, "work", 9500*time.Millisecond)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := postgres.PutTx(ctx, tx, f.q, []byte("w"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if !postgres.Watching(f.db, "work") {
		t.Skip("the put notified itself (the machine stalled for 0.5 s): the watch was not exercised")
	}
	waitFor(t, 30*time.Second, "the watch round to wait for the open transaction", func() bool {
		var k int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%ON CONFLICT (id) DO NOTHING%'`).Scan(&k)
		return k > 0
	})
	if err := f.db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{f.schema, "messages"}.Sanitize()).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d messages (%v), want 1", n, err)
	}
}

// TestWatchLeavesThePool: with a small pool shared by the application's
// transactions (DB.Pool), a commit watch round waiting for an open
// transaction does not keep the pool's last connection from a call that
// transaction makes before its commit (which would wait for the round,
// and the round for it, until the caller's deadline).
//
// It used to fail about 1 run in 16, not because of the watch: when the
// pool's two backends shared a counter row (pid % 16), the Put outside
// waited on the row the transaction's PutTx held until its commit, which
// came after it. Callers' transactions now have counter rows of their own
// (txShard; TestPutDoesNotWaitForOpenTransactions).
func TestWatchLeavesThePool(t *testing.T) {
	f := newTxFixtureURL(t, "pool_max_conns=2", postgres.WithNotifyInterval(10*time.Second))
	ctx := context.Background()
	mon, err := pgxpool.New(ctx, f.url)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	postgres.SetNotifyAgo(f.db, "work", 9500*time.Millisecond)
	tx, err := f.db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := postgres.PutTx(ctx, tx, f.q, []byte("w"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if !postgres.Watching(f.db, "work") {
		t.Skip("the put notified itself (the machine stalled for 0.5 s): the watch was not exercised")
	}
	waitFor(t, 30*time.Second, "the watch round to wait for the open transaction", func() bool {
		var k int
		_ = mon.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%ON CONFLICT (id) DO NOTHING%'`).Scan(&k)
		return k > 0
	})
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second) // a hang guard only
	defer cancel()
	if _, err := f.q.Put(cctx, []byte("outside"), queue.PutOptions{}); err != nil {
		t.Fatalf("a put outside the transaction, before its commit: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestBatchHandlerSettleInTx: a batch handler deletes its messages in its
// transaction (one row each, then the deletes, one commit): the listener
// counts them deleted and deletes none again, and a receipt renewed
// during the call (the call outlasts half the visibility timeout) is the
// one the delete uses.
func TestBatchHandlerSettleInTx(t *testing.T) {
	// A fake clock: the renewal is reached by moving it, and no lease ends
	// by wall time (on the real clock, a renewal late under load lost the
	// lease of a 400 ms visibility).
	fc := clock.NewFake(time.Now())
	f := newTxFixture(t, postgres.WithClock(fc))
	ctx := context.Background()
	const n, vis = 6, 400 * time.Millisecond
	for i := range n {
		if _, err := f.q.Put(ctx, []byte(strconv.Itoa(i)), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var calls atomic.Int64
	var l *listener.Listener
	h := func(ctx context.Context, ms []*queue.Message) []error {
		calls.Add(1)
		errs := make([]error, len(ms))
		tx, err := f.db.Pool().Begin(ctx)
		if err != nil {
			for i := range errs {
				errs[i] = err
			}
			return errs
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		// Outlast half the visibility timeout: the messages are renewed,
		// and their receipts change, before the deletes.
		// The clock moves timer by timer, each move once the callbacks the
		// last one started have returned, and never to the leases' end.
		renewed := l.Stats().Renewed
		leaseEnd := fc.Now().Add(vis)
		waitFor(t, 30*time.Second, "a renewal during the call", func() bool {
			if l.Stats().Renewed > renewed {
				return true
			}
			if next, ok := fc.NextDeadline(); ok && fc.Running() == 0 && next.Before(leaseEnd) {
				fc.Set(next)
			}
			return false
		})
		for i, m := range ms {
			if _, err := tx.Exec(ctx, `INSERT INTO `+f.orders+` (note, msg_id) VALUES ('batch', $1)`, m.ID); err != nil {
				errs[i] = err
				continue
			}
			errs[i] = postgres.DeleteTx(ctx, tx, f.q, m)
		}
		if err := tx.Commit(ctx); err != nil {
			for i := range errs {
				errs[i] = err
			}
		}
		return errs
	}
	var err error
	l, err = listener.NewBatch(f.q, h, listener.Options{Tasks: 1, MinTasks: 1, MaxTasks: 1, BatchSize: n, BatchMax: n,
		BatchWait: time.Second, VisibilityTimeout: vis, Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- l.Run(rctx) }()
	waitFor(t, 60*time.Second, "every message handled", func() bool { return l.Stats().Processed >= n })
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	st := l.Stats()
	if st.Processed != n || st.Deleted != n || st.NotFound != 0 || st.ReceiptMismatches != 0 || st.Failed != 0 {
		t.Fatalf("stats: processed %d deleted %d notFound %d mismatches %d failed %d (%d calls); want %d, %d, 0, 0, 0",
			st.Processed, st.Deleted, st.NotFound, st.ReceiptMismatches, st.Failed, calls.Load(), n, n)
	}
	if c := f.count(t, "true"); c != n {
		t.Fatalf("%d order rows, want %d", c, n)
	}
}
