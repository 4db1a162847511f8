// Package postgres is adaptq's PostgreSQL queue driver: many named queues
// in one schema of a PostgreSQL database, through pgx v5 and pgxpool, with
// the server's LISTEN/NOTIFY as a native push trigger.
//
// Open a database and take queue handles from it:
//
//	db, err := postgres.Open(ctx, "postgres://app@db:5432/app")
//	…
//	defer db.Close()
//	q, err := db.Queue(ctx, "orders") // a *queue.Queue
//
// or, importing the package for its side effect, open a queue by URL with
// queue.Open:
//
//	postgres://USER@HOST:PORT/DB?queue=orders
//	postgres://USER:PASSWORD@HOST/DB?queue=orders&schema=jobs&pool_max_conns=16&sslmode=require
//
// adaptq's parameters are queue (required), schema (DefaultSchema),
// migrate=false (WithoutMigrate), notify_interval (DefaultNotifyInterval),
// max_body and async_leases=true (WithAsyncLeases: faster Gets, at the
// risk the Durability section states); the others are pgx's (PgxParams:
// pool_max_conns, connect_timeout, sslmode …) and ServerParams
// (application_name, and options for the server's settings:
// options=-c%20statement_timeout%3D5s). Any other parameter is refused with
// queue.ErrInvalidURL listing those allowed, before a connection is made: pgx
// would send it to the server as a setting, and a typo (shema=) would fail
// only there. Open and OpenConfig take any pgx connection string. Within
// one process, the queues opened by URL
// with the same connection and options share one DB: one pool, one LISTEN
// connection.
//
// # File layout
//
// doc.go (this), db.go (Open, options, the queues of a DB), schema.go (the
// versioned migrations, Migrate), sql.go (every statement), queue.go (the
// driver.Queue), tx.go (puts and deletes in a caller's transaction),
// notify.go (rate-limited NOTIFY, the commit watch and the LISTEN hub),
// errors.go (which errors are transient), url.go (the postgres:// scheme).
// Package pgtest finds the server tests run against.
//
// # Schema (version 2)
//
// One set of tables holds every queue of a schema, keyed by a small
// queue_id: one table for many queues rather than one per queue, because
// a Get's index range scan of (queue_id, visible_at, id) touches only its
// own queue's entries, whatever the other queues hold, so the shared table
// costs a queue nothing measurable while it keeps queue creation to an
// INSERT (no DDL at run time, no per-queue privileges or migrations, one
// prepared statement per operation however many queues there are).
//
//	queues(id, name UNIQUE, created_at)
//	messages(id bigint identity, queue_id, visible_at, expires_at, inserted_at,
//	         dequeue_count, receipt)                       -- the state a Get changes
//	INDEX messages_ready  (queue_id, visible_at, id)      -- what Get, Peek and the sweep scan
//	bodies(id PRIMARY KEY, body bytea, queue_id, expires_at) -- written once, by Put
//	INDEX bodies_expiry   (queue_id, expires_at)           -- what the sweep probes
//	counts(queue_id, shard, n)                             -- 32 rows per queue
//	adaptq_migrations(version, description, applied_at)
//
// Version 2 added bodies' queue_id and expires_at (copied from the
// messages when it runs: one pass over the bodies) and bodies_expiry. A
// worker of version 1 still running after the migration writes bodies
// without them; the sweep fills them in from the messages (finding such
// bodies through bodies_expiry too), so their messages are swept once
// expired like any other.
//
// Bodies live apart from the state: an UPDATE in PostgreSQL writes a whole
// new row version, so a Get that hid a message in a row holding its body
// would copy the body (and log it to the WAL) at every delivery. A Get
// rewrites only the narrow state row and reads the body by its key.
//
// Message ids are messages.id in decimal; identity columns never hand out
// an id again. A pop receipt is a random 64-bit integer (16 hex digits),
// drawn anew by every Get and UpdateVisibility; Delete and UpdateVisibility
// succeed only with the current one. A message that was never got has no
// receipt (NULL), which matches nothing.
//
// Times are timestamptz (microseconds). Every statement computes from the
// server's now(), so workers on hosts whose clocks disagree still agree on
// visibility timeouts; WithClock makes it compute from a clock of the
// program's (tests move a fake clock).
//
// # Operations
//
// Each operation is one statement, so one round trip and one transaction:
//
//   - Put inserts the state, the body and +1 on a counter row (and, see
//     below, may notify).
//   - Get selects up to n visible, unexpired messages oldest first with
//     FOR UPDATE SKIP LOCKED, so concurrent Gets (in any process) never
//     wait for nor share a message, and in the same statement hides them,
//     draws their receipts and adds 1 to their dequeue counts, returning
//     the bodies joined from their table. Its commit waits for the WAL
//     flush, as every commit does (see Durability for async_leases).
//   - DeleteBatch passes the ids and receipts as two arrays through unnest
//     and deletes the states, the bodies and the count in one statement,
//     returning one outcome per receipt (deleted, stale receipt, gone).
//     Concurrent DeleteBatch calls of a queue in a process share a
//     statement (group commit): while one is on its way the others wait,
//     then go together, so one commit serves several batches under load
//     and none waits when alone. The caller that sends a shared statement
//     serves only the calls queued ahead of its own, never those that
//     arrive meanwhile; a call whose context ends while it waits withdraws
//     its request (once a statement carries it, the call waits for that
//     statement's outcome): a call that returned never acts afterwards,
//     and the group keeps a copy of the receipts, never the caller's
//     slice.
//   - UpdateVisibility updates only a message held with its newest
//     receipt (and, like Get, waits for the flush).
//   - Count sums the queue's 32 counter rows: O(1) in the depth, and
//     approximate as Azure's ApproximateMessagesCount is, since an expired
//     message counts until it is swept. Every statement that adds or
//     deletes messages updates the counter in the same transaction, on the
//     row of its connection's backend pid modulo 16, so concurrent writers
//     rarely wait on one row.
//   - Expired messages are never returned. Every call that reads a queue
//     (Get, Peek, Count, Depth) starts a sweep in the background, at most
//     once per SweepInterval (a second) per queue and process, which
//     deletes the expired messages (states, bodies, count) in statements
//     of 1,000, found through bodies_expiry: so they leave Count, Depth,
//     the table and a Get's path within about a second while anyone uses
//     the queue, live work or not, and a sweep that finds nothing is one
//     index probe. Sweep does it on demand. The index lives on bodies,
//     which Put writes once and nothing updates, so it costs a Put one
//     index entry and a Get none (an index on messages would take a new
//     entry at every Get, which rewrites the state row).
//
// Statements run with generic plans (plan_cache_mode =
// force_generic_plan on the DB's connections, unless the connection
// string sets it): each is planned once per connection, where PostgreSQL
// would otherwise plan a Get again at every execution, at about the cost
// of running it.
//
// A connection that drops in the middle of a Get leaves either no change
// (the transaction rolls back) or messages hidden until their visibility
// timeout, as a consumer that crashed would: nothing is hidden for longer.
//
// # Dead tuples and vacuum
//
// Every Get leaves a dead row version per message and every delete two
// dead rows (state and body). Autovacuum visits a database at most once
// per autovacuum_naptime (a server-wide minute by default, which no table
// setting shortens), and a busy queue makes hundreds of thousands of dead
// rows in that minute, which every Get's index scan then steps over: in
// the benchmark's million-message run with autovacuum alone, n_dead_tup
// passed 2.9 million and the median Get went from 1.3 ms to 31 ms. So a DB
// vacuums its own tables, in the background, after every
// DefaultVacuumEvery (100,000) dead rows its statements made
// (WithVacuumEvery; 0 leaves it to autovacuum), one process at a time per
// table (VACUUM's SKIP_LOCKED; the others skip it): the same run kept
// n_dead_tup under 200,000 and the median Get flat. The tables also carry
// their own autovacuum settings (a fixed threshold of 5,000 dead rows, no
// scale factor, no cost delay; schema.go) for the processes that churn
// less. VACUUM needs the tables' owner: a worker whose role does not own
// them leaves the work to autovacuum (PostgreSQL warns and skips).
//
// # Native notify
//
// Features().NativeNotify is set: a Put notifies the channel "adaptq:" +
// schema with the queue's name as payload, inside its own statement, so
// the notification leaves when the message is committed and any process
// on the database hears it, with no HTTP trigger. Notifications are
// rate-limited per queue and process (DefaultNotifyInterval): a Put within
// the interval of the last notification does not notify, and one
// notification follows such Puts at the end of the interval.
//
// Subscribe is served by one dedicated connection per DB (so per worker
// process) that LISTENs on the channel and wakes the subscribers of the
// queue named in each notification. It connects with the first subscriber
// and disconnects after the last; when it is lost it reconnects with
// jittered exponential backoff (0.1 s to 30 s) and wakes every subscriber
// once it is back, since notifications sent in between were not heard. It
// sends no SQL while idle: TCP keepalives find a dead peer. The worker's
// polling at trigger.safety_interval remains the fallback.
//
// # Connection poolers
//
// LISTEN needs a session of its own, and the generic plans are asked for
// with a startup parameter: behind PgBouncer, use session pooling (or
// point the driver at the server); in transaction pooling a Subscribe
// hears nothing, and PgBouncer refuses the startup parameter unless it
// ignores it (ignore_startup_parameters = plan_cache_mode). Everything
// else (each operation one statement; with async_leases, a Get's
// synchronous_commit set for its own transaction only) works in either
// mode.
//
// # Errors
//
// Lost and refused connections, serialization failures (40001), deadlocks
// (40P01), lock timeouts (55P03), statement timeouts (57014), server
// shutdowns (57P01, 57P02, 57P03, with a 2 s retry hint), too many
// connections (53300, 1 s) and other class 08 errors are transient
// (queue.IsTransient), so the listener retries them.
//
// A call whose context ends while the server runs its statement asks the
// server to cancel it and waits for the answer (up to 5 s): the statement
// stops and the call fails with the context's error, or it was already
// committing (waiting for the WAL flush or a synchronous standby, which a
// cancel cannot undo) and the call reports its success. So a call that
// returned an error never acts afterwards. pgx's default, which drops the
// connection at once and cancels in the background, let a Put store, a
// Get hide or a renewal change the receipt after the call had failed.
// OpenConfig replaces the configuration's context watcher for that; only
// a server that does not answer in 5 s leaves the outcome unknown, as a
// lost reply does.
//
// # Durability
//
// Every operation returns once its transaction has committed; with the
// server's default synchronous_commit = on, what it did survives a power
// loss of the server: an acknowledged Put is never lost, a lease (a Get,
// a renewal) never undone, so two consumers never hold one message inside
// one visibility window and dequeue counts never go back.
//
// async_leases=true (WithAsyncLeases) lets Gets and renewals commit
// without waiting for the flush, for one disk flush less per batch got. A
// server crash, or a failover even to a synchronous standby, can then undo
// leases that consumers were told they hold: those messages are visible
// again while they run, a second consumer can get them, and their dequeue
// counts roll back (a poison message may run more than max_dequeue_count
// times). Puts and deletes still wait, so nothing acknowledged is lost.
// Use it only where handlers are idempotent and the flush is the
// bottleneck; BENCHMARKS.md has its price.
package postgres
