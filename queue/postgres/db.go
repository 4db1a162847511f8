package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// DefaultSchema is the PostgreSQL schema the tables live in unless the URL
// or WithSchema names another: one schema per application or environment
// keeps adaptq's tables apart from the application's own.
const DefaultSchema = "adaptq"

// DefaultNotifyInterval is the shortest time between two notifications a
// process sends for one queue. The first Put after a quiet spell notifies
// at once, in its own statement (the notification leaves at its commit);
// Puts within the interval do not, and one notification follows them when
// it ends. So an idle consumer wakes at once, a busy producer sends at most
// two notifications per interval and queue (not one per message: every
// NOTIFY takes a cluster-wide lock at commit), and no Put goes unsignalled
// for longer than the interval. 5 ms keeps the worst case well inside the
// 10 ms wake target of issue 15.
const DefaultNotifyInterval = 5 * time.Millisecond

// BusyTasks is the pool a listener left to its default tasks grows to
// while its gets come back full (driver.Features.BusyTasks): each Get
// commits, and waits for its WAL flush, so one task waiting on each get
// in turn drained 100,000 messages at 0.25–0.33× the rate of PEERS.md's
// hand-written loop of 8 goroutines, and 8 tasks at 0.9–1.0× of it
// (bench/cmd/pgprobe, issue 34): concurrent gets overlap their round
// trips and share their flushes (group commit), and the hand loop peaks
// at 8 on two cores.
const BusyTasks = 8

// SweepInterval is how often, at most, a process sweeps a queue's expired
// messages: every call that reads the queue (Get, Peek, Count, Depth)
// starts a sweep in the background unless one began within the interval.
// So expired messages leave Count, Depth, the storage and a Get's path
// within about a second of expiring while anyone uses the queue, whether
// or not it has live work. A sweep that finds nothing expired is one probe
// of the bodies_expiry index (microseconds), so once a second per queue
// and process costs nothing a Get would notice.
const SweepInterval = time.Second

// sweepBatch is the most expired messages one sweep statement deletes: one
// short transaction each, so a large backlog is swept without holding
// locks or a snapshot for long.
const sweepBatch = 1000

// sweepTurn is the most statements a background sweep of one queue runs
// before it gives the DB's sweep slot back (50,000 messages): a queue whose
// messages expire faster than one statement deletes them cannot keep the
// other queues of the DB from being swept. The next call that reads the
// queue after SweepInterval goes on where the turn stopped.
const sweepTurn = 50

// cancelWait is how long a statement whose context ended waits for the
// server's answer to the cancel request sent for it: a reachable server
// answers within a round trip or two (the statement stops, or it was
// already committing and completes), and the call then reports what
// happened. A server that has not answered in 5 s is taken as unreachable:
// the connection is dropped and the outcome is unknown, as with a lost
// reply.
const cancelWait = 5 * time.Second

// cancelOnServer is the context watcher of the pool's connections: when a
// statement's context ends, it asks the server to cancel the statement and
// waits for its answer (up to cancelWait), where pgx's default drops the
// connection at once and cancels in the background. A call that returned
// then never acts afterwards: a statement the cancel cannot stop (one
// whose commit waits for the WAL flush or a synchronous standby) comes
// back as a success, not as an error while it commits.
func cancelOnServer(c *pgconn.PgConn) ctxwatch.Handler {
	return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: cancelWait}
}

// clientSkew shifts every reading of the client's clock the driver makes
// (wallNow); tests set it to prove that no decision about a message rests
// on that clock. It is 0 outside tests.
var clientSkew atomic.Int64

// wallNow is the client's clock: the driver reads it only to space its own
// work (notifications, sweeps), never to decide whether a message is
// visible or expired, which the server's now() decides in SQL.
func wallNow() time.Time { return time.Now().Add(time.Duration(clientSkew.Load())) }

// Option configures Open.
type Option func(*options)

type options struct {
	clock          queue.Clock
	schema         string
	maxBody        int
	notifyInterval time.Duration
	noMigrate      bool
	vacuumEvery    int
	asyncLeases    bool
}

// WithClock makes the DB compute every timestamp from c instead of the
// server's clock (tests move a fake clock instead of sleeping). Without it
// the server's now() is used, so workers on hosts with skewed clocks agree
// on visibility timeouts.
func WithClock(c queue.Clock) Option { return func(o *options) { o.clock = c } }

// WithSchema names the PostgreSQL schema of the tables (default
// DefaultSchema).
func WithSchema(s string) Option { return func(o *options) { o.schema = s } }

// WithMaxBodySize sets the largest body Put accepts (default
// queue.DefaultMaxBodySize, Azure's 64 KiB; bodies are bytea, so anything
// up to hundreds of MiB would fit).
func WithMaxBodySize(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.maxBody = n
		}
	}
}

// WithNotifyInterval sets DefaultNotifyInterval's value for this DB; 0
// notifies on every Put.
func WithNotifyInterval(d time.Duration) Option {
	return func(o *options) {
		if d >= 0 {
			o.notifyInterval = d
		}
	}
}

// WithAsyncLeases makes a Get and an UpdateVisibility commit without
// waiting for the server to flush their WAL to disk (synchronous_commit =
// off for their own transactions; Puts and deletes still wait). A Get then
// takes one disk flush less per batch, which is faster on a disk with slow
// flushes, at a risk: a server crash, or a failover (even to a
// synchronous standby), can undo a lease the consumer was told it holds.
// The message is then visible again at once while that consumer runs it,
// so a second consumer can get it (two hold one message inside one
// visibility window), a renewal can be lost the same way, and dequeue
// counts roll back (a poison message can run more than max_dequeue_count
// times). Nothing acknowledged is lost: a Put and a delete wait for the
// flush. Off by default; URL parameter async_leases=true.
func WithAsyncLeases() Option { return func(o *options) { o.asyncLeases = true } }

// WithoutMigrate makes Open refuse a schema that needs migrations
// (ErrSchemaOutdated) instead of applying them: for teams that run
// `adaptq migrate` as a deployment step.
func WithoutMigrate() Option { return func(o *options) { o.noMigrate = true } }

// DB is one PostgreSQL database (one schema of it) holding any number of
// queues, through one pgxpool. It is safe for concurrent use.
type DB struct {
	pool    *pgxpool.Pool
	schema  string
	channel string
	// database is the server's name of the pool's database
	// (current_database()), which a put in a caller's transaction checks
	// (ErrOtherDatabase).
	database string
	clock    queue.Clock // nil: the server's clock
	maxBody  int
	notify   time.Duration

	vacuumEvery int
	churn       atomic.Int64
	vacuuming   atomic.Bool

	sql statements
	hub *hub

	closed atomic.Bool
	bg     context.Context
	stop   context.CancelFunc
	bgMu   sync.Mutex // orders background's wg.Add before Close's Wait
	wg     sync.WaitGroup

	sweepEvery time.Duration
	sweepSlot  chan struct{} // one sweep at a time per DB

	mu     sync.Mutex
	queues map[string]*queueState
}

// queueState is what the handles of one queue share in a process.
type queueState struct {
	id   int32
	name string
	n    notifyLimiter
	dels *deleteGroup

	sweepMu   sync.Mutex
	sweeping  bool
	lastSweep time.Time
}

// Open connects to the database at connString (a libpq URL or key=value
// string, with pgxpool's pool_* parameters) and brings its adaptq schema up
// to date, unless WithoutMigrate.
func Open(ctx context.Context, connString string, opts ...Option) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w: %v", queue.ErrInvalidURL, err)
	}
	return OpenConfig(ctx, cfg, opts...)
}

// OpenConfig is Open with a parsed pool configuration. The pool's
// connections get the DB's own context watcher (cancelOnServer) in place of
// cfg's.
func OpenConfig(ctx context.Context, cfg *pgxpool.Config, opts ...Option) (*DB, error) {
	o := options{schema: DefaultSchema, maxBody: queue.DefaultMaxBodySize, notifyInterval: DefaultNotifyInterval, vacuumEvery: DefaultVacuumEvery}
	for _, opt := range opts {
		opt(&o)
	}
	if err := validSchema(o.schema); err != nil {
		return nil, fmt.Errorf("postgres: open: %w: %v", queue.ErrInvalidArgument, err)
	}
	db := &DB{
		schema:  o.schema,
		channel: "adaptq:" + o.schema,
		clock:   o.clock,
		maxBody: o.maxBody,
		notify:  o.notifyInterval,
		queues:  map[string]*queueState{},

		vacuumEvery: o.vacuumEvery,
		sweepEvery:  SweepInterval,
		sweepSlot:   make(chan struct{}, 1),
	}
	db.sql = newStatements(quoteIdent(o.schema), o.asyncLeases)
	// Migrate (or check) on a connection of its own, before the pool
	// exists, so the pool's connections never see a half-made schema.
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	before, after, err := migrate(ctx, conn, o.schema, !o.noMigrate)
	if err == nil {
		err = conn.QueryRow(ctx, `SELECT current_database()`).Scan(&db.database)
	}
	_ = conn.Close(context.Background())
	if err != nil {
		return nil, fmt.Errorf("postgres: open schema %q: %w", o.schema, err)
	}
	if o.noMigrate && after < SchemaVersion {
		return nil, fmt.Errorf("%w: schema %q is at version %d, this program needs %d", ErrSchemaOutdated, o.schema, before, SchemaVersion)
	}
	// Generic plans: every statement is prepared once per connection and
	// its plan kept, not planned again at each execution (PostgreSQL
	// otherwise keeps planning while custom plans look cheaper, which
	// cost as much as running a Get). The statements are written so that
	// their generic plans use the indexes (sql.go).
	cfg = cfg.Copy()
	if _, set := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !set {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	}
	// The LISTEN connection keeps pgx's watcher: it waits for
	// notifications, not statements, and must let go at once.
	listen := cfg.ConnConfig.Copy()
	cfg.ConnConfig.BuildContextWatcherHandler = cancelOnServer
	db.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	db.bg, db.stop = context.WithCancel(context.Background())
	db.hub = newHub(db, listen)
	return db, nil
}

// Pool is the DB's connection pool, for programs that put messages in
// their own transactions or read the tables.
func (db *DB) Pool() *pgxpool.Pool { return db.pool }

// Schema is the PostgreSQL schema of the DB's tables.
func (db *DB) Schema() string { return db.schema }

// Close stops the DB's listener and closes its pool. Queues taken from it
// fail with queue.ErrClosed afterwards.
func (db *DB) Close() error {
	db.bgMu.Lock()
	was := db.closed.Swap(true)
	db.bgMu.Unlock()
	if was {
		return nil
	}
	db.stop()
	db.hub.close()
	db.wg.Wait()
	db.pool.Close()
	return nil
}

// background runs f(db.bg) in a goroutine the DB owns (Close cancels its
// context and waits for it), then after; it reports false, running
// neither, once the DB is closed.
func (db *DB) background(f func(context.Context), after func()) bool {
	db.bgMu.Lock()
	defer db.bgMu.Unlock()
	if db.closed.Load() {
		return false
	}
	db.wg.Add(1)
	go func() {
		defer db.wg.Done()
		if after != nil {
			defer after()
		}
		f(db.bg)
	}()
	return true
}

// Queue returns the queue called name, creating it on first use. opts
// configure the handle as in queue.New.
func (db *DB) Queue(ctx context.Context, name string, opts ...queue.Option) (*queue.Queue, error) {
	d, err := db.queue(ctx, name)
	if err != nil {
		return nil, err
	}
	return queue.New(d, opts...), nil
}

// queue returns the driver of the queue called name.
func (db *DB) queue(ctx context.Context, name string) (*pgQueue, error) {
	if err := queue.ValidateName(name); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if db.closed.Load() {
		return nil, fmt.Errorf("postgres: queue %q: %w", name, queue.ErrClosed)
	}
	db.mu.Lock()
	st, ok := db.queues[name]
	db.mu.Unlock()
	if !ok {
		id, err := db.register(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("postgres: queue %q: %w", name, err)
		}
		db.mu.Lock()
		if st, ok = db.queues[name]; !ok {
			st = &queueState{id: id, name: name, dels: newDeleteGroup()}
			db.queues[name] = st
		}
		db.mu.Unlock()
	}
	return &pgQueue{db: db, st: st}, nil
}

// register creates the queue's row and its counter rows if they are not
// there (the plain statements' and the callers' transactions', see
// txShard: a queue created before the latter were kept gets them here),
// and returns its id.
func (db *DB) register(ctx context.Context, name string) (int32, error) {
	var id int32
	err := db.pool.QueryRow(ctx, db.sql.register, name, 2*countShards).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		// Created by another process between our insert and select: run
		// it again, not a bare lookup, which would leave the counter rows
		// that process did not create (a version that kept 16 made none
		// of txShard's) missing, and a PutTx would count nothing.
		err = db.pool.QueryRow(ctx, db.sql.register, name, 2*countShards).Scan(&id)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		err = db.pool.QueryRow(ctx, db.sql.lookup, name).Scan(&id)
	}
	return id, err
}

// nowArg is the time every statement computes from: the DB's clock if it
// has one, else NULL, which the statements read as the server's now().
func (db *DB) nowArg() any {
	if db.clock == nil {
		return nil
	}
	return db.clock.Now()
}

// Queues lists the queues of the DB's schema.
func (db *DB) Queues(ctx context.Context) ([]string, error) {
	rows, err := db.pool.Query(ctx, `SELECT name FROM `+quoteIdent(db.schema)+`.queues ORDER BY name`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

var _ driver.Queue = (*pgQueue)(nil)
