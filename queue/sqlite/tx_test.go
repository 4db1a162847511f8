package sqlite

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/scaling"
)

// wakes records the queues DB.SQL's commit hook named.
type wakes struct {
	mu    sync.Mutex
	names []string
}

func (w *wakes) notify(name string) {
	w.mu.Lock()
	w.names = append(w.names, name)
	w.mu.Unlock()
}

func (w *wakes) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.names
	w.names = nil
	return n
}

// appDB is the application's *sql.DB on the DB's file, with an orders
// table.
func appDB(t *testing.T, db *DB, w *wakes) *sql.DB {
	t.Helper()
	var f func(string)
	if w != nil {
		f = w.notify
	}
	s, err := db.SQL(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Exec(`CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, note TEXT NOT NULL, msg_id TEXT)`); err != nil {
		t.Fatal(err)
	}
	return s
}

func orderRows(t *testing.T, s *sql.DB, where string) int {
	t.Helper()
	var n int
	if err := s.QueryRow(`SELECT count(*) FROM orders WHERE ` + where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPutTxRollbackAndCommit: rolled back, a put in the application's
// transaction leaves no message and wakes nobody; committed, the message
// is there with its row, and the commit names its queue once.
func TestPutTxRollbackAndCommit(t *testing.T) {
	db, _, _ := newDB(t)
	q := mustQueue(t, db, "work")
	var w wakes
	s := appDB(t, db, &w)
	put := func(note string) (*sql.Tx, string) {
		tx, err := s.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(`INSERT INTO orders (note) VALUES (?)`, note); err != nil {
			t.Fatal(err)
		}
		id, err := PutTx(ctx, tx, q, []byte(note), queue.PutOptions{Metadata: map[string]string{"note": note}})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := q.Count(ctx); err != nil || n != 0 {
			t.Fatalf("Count before the commit = %d (%v), want 0", n, err)
		}
		return tx, id
	}
	tx, _ := put("rolled back")
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := w.take(); len(got) != 0 {
		t.Fatalf("the rollback woke %v", got)
	}
	if n, _ := q.Count(ctx); n != 0 || orderRows(t, s, "1") != 0 {
		t.Fatalf("after the rollback: %d messages, %d rows", n, orderRows(t, s, "1"))
	}
	tx, id := put("committed")
	if got := w.take(); len(got) != 0 {
		t.Fatalf("woken before the commit: %v", got)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := w.take(); len(got) != 1 || got[0] != "work" {
		t.Fatalf("the commit woke %v, want [work]", got)
	}
	ms := mustGet(t, q, 32, time.Minute)
	if len(ms) != 1 || ms[0].ID != id || string(ms[0].Body) != "committed" || ms[0].Metadata["note"] != "committed" || orderRows(t, s, "note = 'committed'") != 1 {
		t.Fatalf("after the commit: %v", ms)
	}
	// A transaction that puts nothing wakes nobody.
	if _, err := s.Exec(`INSERT INTO orders (note) VALUES ('no message')`); err != nil {
		t.Fatal(err)
	}
	if got := w.take(); len(got) != 0 {
		t.Fatalf("a commit without a put woke %v", got)
	}
}

// TestPutTxChecksAndOtherFile: the portable checks apply, a failed put
// leaves the transaction as it was, and a transaction on another file is
// refused.
func TestPutTxChecksAndOtherFile(t *testing.T) {
	db, _, _ := newDB(t, WithMaxBodySize(4))
	q := mustQueue(t, db, "work")
	s := appDB(t, db, nil)
	tx, err := s.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PutTx(ctx, tx, q, []byte("12345"), queue.PutOptions{}); !errors.Is(err, queue.ErrTooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
	if _, err := PutTx(ctx, tx, q, nil, queue.PutOptions{InitialVisibilityDelay: -1}); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("negative delay: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := PutTx(cctx, tx, q, []byte("x"), queue.PutOptions{}); err == nil {
		t.Fatal("put with an ended context succeeded")
	}
	if _, err := PutTx(ctx, tx, q, []byte("ok"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n, _ := q.Count(ctx); n != 1 || rawCount(t, db, "bodies") != 1 {
		t.Fatalf("%d messages and %d bodies, want the one good put", n, rawCount(t, db, "bodies"))
	}

	other, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "other.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	otx, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer otx.Rollback() //nolint:errcheck
	if _, err := PutTx(ctx, otx, q, []byte("x"), queue.PutOptions{}); !errors.Is(err, ErrOtherDatabase) {
		t.Fatalf("another file: %v, want ErrOtherDatabase", err)
	}
	// The application's own *sql.DB on the same file (another path to
	// it) is accepted; it wakes nobody by itself.
	own, err := sql.Open("sqlite", "file:"+filepath.Join(filepath.Dir(db.Path()), ".", "q.db")+"?_txlock=immediate&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	tx, err = own.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PutTx(ctx, tx, q, []byte("own"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// handleInTx is a handler's transaction: a row for m and m's delete,
// committed together unless rollback.
func handleInTx(ctx context.Context, s *sql.DB, q *queue.Queue, m *queue.Message, rollback bool) error {
	tx, err := s.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (note, msg_id) VALUES ('handled', ?)`, m.ID); err != nil {
		return err
	}
	if err := DeleteTx(ctx, tx, q, m); err != nil {
		return err
	}
	if rollback {
		return errors.New("rolled back on purpose")
	}
	return tx.Commit()
}

// TestDeleteTxSQLite: the delete commits with the handler's row; rolled
// back, the message is still held with its receipt and comes back; a
// stale receipt is ErrReceiptMismatch.
func TestDeleteTxSQLite(t *testing.T) {
	db, _, _ := newDB(t)
	q := mustQueue(t, db, "work")
	s := appDB(t, db, nil)
	id := mustPut(t, q, "a", queue.PutOptions{})
	ms := mustGet(t, q, 1, time.Minute)
	if err := handleInTx(ctx, s, q, ms[0], true); err == nil {
		t.Fatal("want the rollback's error")
	}
	if orderRows(t, s, "1") != 0 {
		t.Fatal("a row survived the rollback")
	}
	if _, err := q.UpdateVisibility(ctx, id, ms[0].PopReceipt, 0); err != nil {
		t.Fatalf("not held with its receipt after the rollback: %v", err)
	}
	again := mustGet(t, q, 1, time.Minute)
	if len(again) != 1 || again[0].DequeueCount != 2 {
		t.Fatalf("redelivery: %v", again)
	}
	if err := handleInTx(ctx, s, q, ms[0], false); !errors.Is(err, queue.ErrReceiptMismatch) {
		t.Fatalf("stale receipt: %v", err)
	}
	if err := handleInTx(ctx, s, q, again[0], false); err != nil {
		t.Fatal(err)
	}
	if orderRows(t, s, "msg_id = '"+id+"'") != 1 || rawCount(t, db, "messages") != 0 || rawCount(t, db, "bodies") != 0 {
		t.Fatal("want one row and no message")
	}
	if n, _ := q.Count(ctx); n != 0 {
		t.Fatalf("Count = %d", n)
	}
}

// TestListenerSettleInTxSQLite: a listener on the file counts messages
// its handler settled in its own transaction as processed and deleted,
// deletes none itself, and redelivers those whose transaction rolled back;
// puts in the application's transactions wake it through DB.SQL.
func TestListenerSettleInTxSQLite(t *testing.T) {
	// The DB and the listener share a fake clock: no lease can end by
	// wall time (a 300 ms visibility on the real clock ran out, under
	// load, in a handler that then committed: "failed 11"). The
	// rolled-back wait out their visibility when the test moves the clock,
	// once nothing is in flight.
	db, fc, _ := newDB(t)
	q := mustQueue(t, db, "work")
	var n listener.LocalNotifier
	s := appDB(t, db, nil)
	ws, err := db.SQL(n.Notify)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	// vis is a lease far beyond what tickShort moves the clock while
	// handlers run (at most short a step, a step per 100 µs of wall time).
	const total, vis, short = 20, 24 * time.Hour, 10 * time.Millisecond
	var runs sync.Map
	var done atomic.Int64
	h := func(ctx context.Context, m *queue.Message) error {
		c, _ := runs.LoadOrStore(m.ID, new(atomic.Int64))
		k := c.(*atomic.Int64).Add(1)
		i, _ := strconv.Atoi(string(m.Body))
		err := handleInTx(ctx, s, q, m, i%2 == 0 && k == 1)
		if err == nil {
			done.Add(1)
		}
		return err
	}
	l, err := listener.New(q, h, listener.Options{Tasks: 1, MinTasks: 1, MaxTasks: 1, BatchSize: 8, Notifier: &n,
		SafetyInterval: time.Hour, VisibilityTimeout: vis, Clock: fc, Idle: scaling.IdleBackoff{Max: short},
		RetryDelay: func(*queue.Message, error) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	tickShort(t, fc, short)
	go func() { errc <- l.Run(rctx) }()
	for i := range total {
		tx, err := ws.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := PutTx(ctx, tx, q, []byte(strconv.Itoa(i)), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	// Every first run ends (the odd commit, the even roll back and fail)
	// with the fake time still where the gets were: no lease has ended.
	testutil.Eventually(t, time.Minute, "every first run ends", func() bool {
		st := l.Stats()
		return st.Processed == total/2 && st.Failed == total/2
	})
	if st := l.Stats(); done.Load() != total/2 || st.ReceiptMismatches != 0 || st.NotFound != 0 {
		t.Fatalf("first runs: %d committed, mismatches %d notFound %d", done.Load(), st.ReceiptMismatches, st.NotFound)
	}
	// Nothing is in flight: the rolled-back's visibility ends, and a wake
	// sends the listener to get them (its idle sleep may be longer).
	fc.Advance(vis)
	n.Notify("work")
	testutil.Eventually(t, time.Minute, "the second runs commit", func() bool { return done.Load() == total })
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	st := l.Stats()
	if st.Processed != total || st.Deleted != total || st.NotFound != 0 || st.ReceiptMismatches != 0 || st.Failed != total/2 {
		t.Fatalf("stats: processed %d deleted %d notFound %d mismatches %d failed %d", st.Processed, st.Deleted, st.NotFound, st.ReceiptMismatches, st.Failed)
	}
	if st.Triggers == 0 {
		t.Fatal("the commits never woke the listener")
	}
	if orderRows(t, s, "1") != total || rawCount(t, db, "messages") != 0 {
		t.Fatal("want one row per message and no message left")
	}
}

// tickShort moves c to each timer due within short of its time, until the
// test ends: the listener's pacing, trigger floor and idle sleeps (all
// within short) run in virtual time, while a lease (far longer) never
// ends by it. It is not a sleep the outcome depends on: the polling only
// lets the woken goroutines move.
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

// TestSettleInTxLostLeaseSQLite: consumers whose leases expire in their
// handlers (the fake clock jumps past the visibility timeout and the
// jumping consumer steals held messages before its transaction) never
// write a message's row twice. ADAPTQ_TX_LOST_LEASE_N sets the count
// (the 10,000); 300 by default, to keep make test fast (the
// application's transactions and the queue's writes take turns at the
// file's write lock: about 8 ms a message under -race).
func TestSettleInTxLostLeaseSQLite(t *testing.T) {
	n := 300
	if v, err := strconv.Atoi(os.Getenv("ADAPTQ_TX_LOST_LEASE_N")); err == nil && v > 0 {
		n = v
	}
	db, fc, _ := newDB(t)
	q := mustQueue(t, db, "work")
	s := appDB(t, db, nil)
	tx, err := s.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := PutTx(ctx, tx, q, []byte(strconv.Itoa(i)), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	const vis = time.Second
	var lost, settled atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 30))
			var stolen []*queue.Message
			for settled.Load() < int64(n) {
				ms := stolen
				stolen = nil
				if len(ms) == 0 {
					var err error
					if ms, err = q.Get(ctx, 8, vis); err != nil {
						errc <- err
						return
					}
				}
				if len(ms) == 0 {
					fc.Advance(2 * vis)
					continue
				}
				for _, m := range ms {
					if rng.IntN(4) == 0 {
						fc.Advance(2 * vis) // every lease held now ends in its handler
						got, err := q.Get(ctx, 4, vis)
						if err != nil {
							errc <- err
							return
						}
						stolen = append(stolen, got...)
					}
					switch err := handleInTx(ctx, s, q, m, false); {
					case errors.Is(err, queue.ErrReceiptMismatch), errors.Is(err, queue.ErrNotFound):
						lost.Add(1)
					case err != nil:
						errc <- err
						return
					default:
						settled.Add(1)
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
	if err := s.QueryRow(`SELECT count(*), count(DISTINCT msg_id) FROM orders`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != n || distinct != n {
		t.Fatalf("%d rows for %d distinct messages, want %d each", rows, distinct, n)
	}
	if lost.Load() == 0 {
		t.Fatal("no lease was lost: the lost-lease case went untested")
	}
	t.Logf("%d messages, %d deletes found their lease lost and rolled back", n, lost.Load())
}

// TestHelperTxChild (switched on by txChildEnv = mode, the file in
// txChildPath): writes an order row and puts a message in one transaction,
// commits it or not, prints "ready" and waits to be killed.
const (
	txChildEnv  = "ADAPTQ_SQLITE_TX_CHILD"
	txChildPath = "ADAPTQ_SQLITE_TX_PATH"
)

func TestHelperTxChild(t *testing.T) {
	mode := os.Getenv(txChildEnv)
	if mode == "" {
		t.Skip("the child process of the crash tests")
	}
	err := func() error {
		db, err := Open(os.Getenv(txChildPath))
		if err != nil {
			return err
		}
		q, err := db.Queue("work")
		if err != nil {
			return err
		}
		s, err := db.SQL(nil)
		if err != nil {
			return err
		}
		tx, err := s.BeginTx(context.Background(), nil)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(`INSERT INTO orders (note) VALUES ('crash')`); err != nil {
			return err
		}
		if _, err := PutTx(context.Background(), tx, q, []byte("crash"), queue.PutOptions{}); err != nil {
			return err
		}
		if mode == "commit" {
			return tx.Commit()
		}
		return nil
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	select {} // killed by the parent
}

// TestPutTxCrashSQLite: a process killed (SIGKILL) between its data write
// and its commit leaves neither the row nor the message in the file;
// killed after the commit, both.
func TestPutTxCrashSQLite(t *testing.T) {
	for _, mode := range []string{"open", "commit"} {
		t.Run(mode, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "q.db")
			{
				db, err := Open(path)
				if err != nil {
					t.Fatal(err)
				}
				mustQueue(t, db, "work")
				appDB(t, db, nil).Close()
				db.Close()
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperTxChild$")
			cmd.Env = append(os.Environ(), txChildEnv+"="+mode, txChildPath+"="+path)
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
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if !ready {
				t.Fatal("the child ended before it was ready")
			}
			db, err := Open(path, WithClock(clock.NewFake(time.Now())))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			want := 0
			if mode == "commit" {
				want = 1
			}
			if n := rawCount(t, db, "orders"); n != want {
				t.Fatalf("%d order rows, want %d", n, want)
			}
			if n := rawCount(t, db, "messages"); n != want {
				t.Fatalf("%d messages, want %d", n, want)
			}
		})
	}
}
