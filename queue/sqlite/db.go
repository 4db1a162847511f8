package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/adaptq/adaptq/queue"
)

// DefaultBusyTimeout is how long a statement waits for another process to
// release the database's write lock before it fails with a transient
// error. Five seconds is far above any single transaction of this driver
// (they last microseconds to milliseconds) and short enough that a caller's
// retry loop still sees a stuck writer.
const DefaultBusyTimeout = 5 * time.Second

// readConns is the size of the read-only pool used by Peek and Count: they
// are rare next to Get, so a few connections are plenty.
const readConns = 4

// Option configures Open.
type Option func(*options)

type options struct {
	clock       queue.Clock
	maxBody     int
	busyTimeout time.Duration
	sync        Sync
}

// Sync is how a commit reaches the disk.
type Sync int

const (
	// SyncNormal (the default) is WAL with synchronous NORMAL: a commit is
	// written to the WAL but not flushed, and the WAL is flushed at each
	// checkpoint. A Put that returned survives a crash or kill of the
	// process; a power cut or OS crash may lose the last commits (never
	// corrupting the file).
	SyncNormal Sync = iota
	// SyncFull is WAL with synchronous FULL: every commit flushes the WAL
	// (fsync) before it returns, so a Put that returned survives a power
	// cut too, at the price of one flush per commit (per group of Puts).
	SyncFull
)

// String returns the name the URL parameter sync takes: "normal" or "full".
func (s Sync) String() string {
	if s == SyncFull {
		return "full"
	}
	return "normal"
}

// WithSync sets how commits reach the disk (default SyncNormal).
func WithSync(s Sync) Option {
	return func(o *options) {
		if s == SyncFull {
			o.sync = SyncFull
		}
	}
}

// WithClock sets the clock the DB reads for every timestamp it stores and
// compares (default queue.SystemClock{}). Tests pass a fake clock to move
// time instead of sleeping.
func WithClock(c queue.Clock) Option {
	return func(o *options) {
		if c != nil {
			o.clock = c
		}
	}
}

// WithMaxBodySize sets the largest body Put accepts, in bytes (default
// queue.DefaultMaxBodySize). Values below 1 leave the default.
func WithMaxBodySize(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.maxBody = n
		}
	}
}

// WithBusyTimeout sets how long a statement waits for a lock held by
// another process (default DefaultBusyTimeout). Values below 1 ms leave the
// default.
func WithBusyTimeout(d time.Duration) Option {
	return func(o *options) {
		if d >= time.Millisecond {
			o.busyTimeout = d
		}
	}
}

// DB is one SQLite database file holding any number of queues. It is safe
// for concurrent use; see the package doc for its concurrency model.
type DB struct {
	path        string
	clock       queue.Clock
	maxBody     int
	sync        Sync
	busyTimeout time.Duration

	w    *sql.DB // writes: exactly one connection
	r    *sql.DB // Peek and Count: read-only connections
	ckpt *sql.DB // the checkpoint loop's one connection (checkpoint.go)

	stopVacuum context.CancelFunc // ends the vacuum loop …
	vacuumDone chan struct{}      // … which closes this

	stopCkpt context.CancelFunc             // ends the checkpoint loop …
	ckptDone chan struct{}                  // … which closes this
	ckptKick chan struct{}                  // wakes it (cap 1)
	ckptMu   sync.Mutex                     // one checkpoint at a time: the loop's or the vacuum's
	commits  atomic.Int64                   // write transactions committed
	ckptHook func(log, done int, err error) // tests: called after each checkpoint of the loop

	st   statements
	puts putGroup // Puts waiting to share a commit

	closed atomic.Bool

	mu     sync.Mutex
	queues map[string]int64 // queue name → queues.id
}

// statements are prepared once per DB. database/sql prepares each again on
// every connection it is used on; the write pool has one.
type statements struct {
	put, putBody, putBodyMeta, depth, getSelect, del, exists, existsBatch, update *sql.Stmt // write pool
	purgeBodies, purge, clearBodies, clear, clearDepth                            *sql.Stmt // write pool
	peek, peekAfter, count                                                        *sql.Stmt // read pool

	// getHide[k] is sqlGetHide(1<<k), on the write pool.
	getHide [deleteBatchClasses]*sql.Stmt

	// delBatch[k] is sqlDeleteBatch(1<<k) and delBodies[k]
	// sqlDeleteBodies(1<<k): batches are padded with NULLs to the next
	// power of two, so six statements serve every size.
	delBatch, delBodies [deleteBatchClasses]*sql.Stmt
	// delBatchOne[k] is sqlDeleteBatchOne(1<<k).
	delBatchOne [deleteBatchClasses]*sql.Stmt
}

// Open opens the SQLite database at path, creating the file and its
// directory if needed, and brings its schema up to date. A file written by a
// newer version of this package is refused with ErrSchemaTooNew.
func Open(path string, opts ...Option) (*DB, error) {
	o := options{clock: queue.SystemClock{}, maxBody: queue.DefaultMaxBodySize, busyTimeout: DefaultBusyTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if path == "" {
		return nil, fmt.Errorf("sqlite: open: %w: empty path", queue.ErrInvalidArgument)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o750); err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	db := &DB{path: abs, clock: o.clock, maxBody: o.maxBody, sync: o.sync, busyTimeout: o.busyTimeout, queues: map[string]int64{}}
	if err := db.open(o.busyTimeout, o.sync); err != nil {
		db.closePools()
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, classify(err))
	}
	ctx, cancel := context.WithCancel(context.Background())
	db.stopVacuum, db.vacuumDone = cancel, make(chan struct{})
	go db.vacuumLoop(ctx)
	ctx, cancel = context.WithCancel(context.Background())
	db.stopCkpt, db.ckptDone, db.ckptKick = cancel, make(chan struct{}), make(chan struct{}, 1)
	go db.checkpointLoop(ctx, db.ckpt)
	return db, nil
}

func (db *DB) open(busyTimeout time.Duration, sync Sync) (err error) {
	ms := strconv.FormatInt(busyTimeout.Milliseconds(), 10)
	if db.w, err = sql.Open("sqlite", dsn(db.path, ms, sync, false)); err != nil {
		return err
	}
	// One writer connection, kept for the life of the DB.
	db.w.SetMaxOpenConns(1)
	db.w.SetMaxIdleConns(1)
	db.w.SetConnMaxLifetime(0)
	db.w.SetConnMaxIdleTime(0)
	if err := migrate(context.Background(), db.w); err != nil {
		return err
	}
	if err := incrementalVacuum(context.Background(), db.w); err != nil {
		return err
	}
	if db.r, err = sql.Open("sqlite", dsn(db.path, ms, sync, true)); err != nil {
		return err
	}
	n := min(readConns, runtime.GOMAXPROCS(0))
	db.r.SetMaxOpenConns(n)
	db.r.SetMaxIdleConns(n)
	db.r.SetConnMaxIdleTime(time.Minute)
	// The checkpoint loop's connection: it writes the database file, so
	// it is not query-only, but it runs nothing but checkpoints.
	if db.ckpt, err = sql.Open("sqlite", checkpointerDSN(db.path, ms, sync)); err != nil {
		return err
	}
	db.ckpt.SetMaxOpenConns(1)
	db.ckpt.SetMaxIdleConns(1)
	db.ckpt.SetConnMaxLifetime(0)
	db.ckpt.SetConnMaxIdleTime(0)
	return db.prepare()
}

// mmapSize is how much of the database file each connection maps into
// memory (PRAGMA mmap_size): pages are read from the mapping instead of
// with a read call per 4 KiB page, which matters for large bodies. It is address space, not memory:
// the pages are the operating system's file cache. Pages still in the WAL
// are read as before.
const mmapSize = 1 << 30

// walSizeLimit is the size the WAL file is cut back to when it starts over
// after a checkpoint (PRAGMA journal_size_limit): a burst of large
// transactions grows it, and without a limit it would keep that size.
const walSizeLimit = 4 << 20

// dsn is the modernc.org/sqlite data source name for path: WAL, synchronous
// NORMAL (FULL with SyncFull), the busy timeout, BEGIN IMMEDIATE for
// transactions, and for the writer incremental auto-vacuum (which takes
// effect on a new file; incrementalVacuum converts an old one).
func dsn(path, busyMillis string, sync Sync, readOnly bool) string {
	q := url.Values{}
	q.Set("_busy_timeout", busyMillis)
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", strings.ToUpper(sync.String()))
	q.Set("_txlock", "immediate")
	q.Add("_pragma", "temp_store(MEMORY)")
	q.Add("_pragma", fmt.Sprintf("mmap_size(%d)", mmapSize))
	if readOnly {
		q.Set("_query_only", "1")
	} else {
		q.Set("_auto_vacuum", "INCREMENTAL")
		q.Add("_pragma", fmt.Sprintf("journal_size_limit(%d)", walSizeLimit))
	}
	p := filepath.ToSlash(path)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // file:///C:/x on Windows
	}
	u := url.URL{Scheme: "file", Path: p, RawQuery: q.Encode()}
	return u.String()
}

// checkpointerDSN is dsn for the checkpoint loop's connection: the
// writer's, without auto_vacuum, whose PRAGMA is a write transaction (it
// stores the mode in the file's header): the loop's connection, opened at
// its first checkpoint, would take the write lock from the writer, or wait
// up to the busy timeout for another process's writer, and so hold up
// Close. A checkpoint takes no write lock.
func checkpointerDSN(path, busyMillis string, sync Sync) string {
	u, err := url.Parse(dsn(path, busyMillis, sync, false))
	if err != nil {
		panic(err) // dsn built it
	}
	q := u.Query()
	q.Del("_auto_vacuum")
	u.RawQuery = q.Encode()
	return u.String()
}

func (db *DB) prepare() error {
	w := []struct {
		p   **sql.Stmt
		sql string
	}{
		{&db.st.put, sqlPut},
		{&db.st.putBody, sqlPutBody},
		{&db.st.putBodyMeta, sqlPutBodyMeta},
		{&db.st.depth, sqlDepth},
		{&db.st.getSelect, sqlGetSelect},
		{&db.st.del, sqlDelete},
		{&db.st.exists, sqlExists},
		{&db.st.existsBatch, sqlExistsBatch},
		{&db.st.update, sqlUpdateVisibility},
		{&db.st.purgeBodies, sqlPurgeBodies},
		{&db.st.purge, sqlPurge},
		{&db.st.clearBodies, sqlClearBodies},
		{&db.st.clear, sqlClear},
		{&db.st.clearDepth, sqlClearDepth},
	}
	for _, s := range w {
		st, err := db.w.Prepare(s.sql)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", s.sql, err)
		}
		*s.p = st
	}
	for k := range db.st.delBatch {
		st, err := db.w.Prepare(sqlDeleteBatch(1 << k))
		if err != nil {
			return fmt.Errorf("prepare delete batch of %d: %w", 1<<k, err)
		}
		db.st.delBatch[k] = st
		if st, err = db.w.Prepare(sqlDeleteBatchOne(1 << k)); err != nil {
			return fmt.Errorf("prepare delete batch of %d with one receipt: %w", 1<<k, err)
		}
		db.st.delBatchOne[k] = st
		if st, err = db.w.Prepare(sqlDeleteBodies(1 << k)); err != nil {
			return fmt.Errorf("prepare delete of %d bodies: %w", 1<<k, err)
		}
		db.st.delBodies[k] = st
		if st, err = db.w.Prepare(sqlGetHide(1 << k)); err != nil {
			return fmt.Errorf("prepare hide of %d messages: %w", 1<<k, err)
		}
		db.st.getHide[k] = st
	}
	r := []struct {
		p   **sql.Stmt
		sql string
	}{
		{&db.st.peek, sqlPeek},
		{&db.st.peekAfter, sqlPeekAfter},
		{&db.st.count, sqlCount},
	}
	for _, s := range r {
		st, err := db.r.Prepare(s.sql)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", s.sql, err)
		}
		*s.p = st
	}
	return nil
}

// Path is the absolute path of the database file.
func (db *DB) Path() string { return db.path }

// Queue returns a handle on the queue called name, creating the queue in
// the file if it is new. The name must pass queue.ValidateName; if it does
// not, the error wraps queue.ErrInvalidName and nothing is created. Handles
// are cheap; closing one does not close the DB. opts configure the handle
// as in queue.New (a meter, a wrapper).
func (db *DB) Queue(name string, opts ...queue.Option) (*queue.Queue, error) {
	d, err := db.queue(name)
	if err != nil {
		return nil, fmt.Errorf("sqlite: queue %q: %w", name, err)
	}
	return queue.New(d, opts...), nil
}

// queue returns the driver of the queue called name.
func (db *DB) queue(name string) (*driverQueue, error) {
	if err := queue.ValidateName(name); err != nil {
		return nil, err
	}
	if db.closed.Load() {
		return nil, queue.ErrClosed
	}
	id, err := db.queueID(name)
	if err != nil {
		return nil, db.mapErr(err)
	}
	return &driverQueue{db: db, name: name, qid: id}, nil
}

// queueID returns the queues.id of name, inserting the row if needed.
func (db *DB) queueID(name string) (int64, error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if id, ok := db.queues[name]; ok {
		return id, nil
	}
	var id int64
	err := db.w.QueryRow(sqlEnsureQueue, name, db.clock.Now().UnixNano()).Scan(&id)
	if err != nil {
		return 0, err
	}
	db.queues[name] = id
	return id, nil
}

// Close closes the database. Queue handles taken from it fail with
// queue.ErrClosed afterwards. Closing twice is a no-op.
func (db *DB) Close() error {
	if db.closed.Swap(true) {
		return nil
	}
	if db.stopVacuum != nil {
		db.stopVacuum()
		<-db.vacuumDone
	}
	if db.stopCkpt != nil {
		db.stopCkpt()
		<-db.ckptDone
	}
	return db.closePools()
}

func (db *DB) closePools() error {
	var errs []error
	for _, p := range []*sql.DB{db.ckpt, db.r, db.w} { // statements close with their pool
		if p != nil {
			errs = append(errs, p.Close())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sqlite: close %s: %w", db.path, err)
	}
	return nil
}

// mapErr turns an error of the database into one the contract names: a
// closed DB is queue.ErrClosed, a lock held too long is queue.Transient.
func (db *DB) mapErr(err error) error {
	if db.closed.Load() {
		return fmt.Errorf("%w (%v)", queue.ErrClosed, err)
	}
	return classify(err)
}

// classify marks SQLITE_BUSY and SQLITE_LOCKED (which survived the busy
// timeout) as transient.
func classify(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return queue.Transient(err, 0)
		}
	}
	return err
}
