// Package sqlite is adaptq's embedded, durable default queue driver: many
// named queues in one SQLite database file, through the pure-Go
// modernc.org/sqlite (no cgo).
//
// Open a file and take queue handles from it:
//
//	db, err := sqlite.Open("./data/adaptq.db")
//	…
//	defer db.Close()
//	q, err := db.Queue("orders") // a *queue.Queue; batch deletes are one transaction
//
// or, importing the package for its side effect, open a queue by URL with
// queue.Open:
//
//	sqlite:///var/lib/adaptq/adaptq.db?queue=orders
//	sqlite://./data/adaptq.db?queue=orders&busy_timeout=10s
//	sqlite:///var/lib/adaptq/adaptq.db?queue=orders&sync=full
//
// Within one process, every URL naming the same file shares one DB, which is
// closed when the last queue opened that way is closed.
//
// # File layout
//
// Source files: doc.go (this), db.go (Open, options, connection pools,
// prepared statements), schema.go (the versioned schema and its migrations),
// queue.go (the queue.Queue implementation and its SQL), group.go (Puts
// sharing commits), checkpoint.go (checkpoints off the writer), tx.go (puts
// and deletes in the application's transaction, DB.SQL), vacuum.go (giving
// a drained file's space back), url.go (the sqlite:// scheme).
//
// The database file is an ordinary SQLite database in WAL mode: name.db plus
// name.db-wal and name.db-shm beside it while it is open. Its header carries
// application_id 0x61647471 ("adtq") and user_version = the schema version.
//
// # Schema (version 4)
//
//	queues(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE, created_at INTEGER,
//	       depth INTEGER)
//	messages(id INTEGER PRIMARY KEY AUTOINCREMENT, queue_id INTEGER,
//	         inserted_at INTEGER, visible_at INTEGER, expires_at INTEGER,
//	         dequeue_count INTEGER, receipt INTEGER)
//	bodies(id INTEGER PRIMARY KEY, body BLOB, meta BLOB)  -- id = messages.id
//	INDEX messages_ready ON messages(queue_id, visible_at, id, expires_at) WHERE receipt IS NULL
//	INDEX messages_held  ON messages(queue_id, visible_at, id, expires_at) WHERE receipt IS NOT NULL
//	INDEX messages_expiry ON messages(queue_id, expires_at)
//
// A message's changing state (visible_at, receipt, dequeue_count) is in
// messages, its body in bodies: a Get or an UpdateVisibility rewrites the
// small messages row and never the body, so draining a 64 KiB message writes
// a few KiB, not the body again. A Put inserts both rows; a delete removes
// both, in one transaction.
//
// Times are absolute Unix nanoseconds read from the DB's queue.Clock, so
// tests move a fake clock instead of sleeping, and a restart (or another
// process) sees the same deadlines. A message put with queue.NoExpiry has
// expires_at = math.MaxInt64. Message ids are the decimal text of
// messages.id; AUTOINCREMENT guarantees that an id is never handed out again,
// not after deleting the newest message and not after Clear, because handlers
// key their idempotency on it.
//
// The two indexes order each queue's messages as Get takes them, oldest
// visible_at first and then by id (FIFO), messages_ready those never got and
// messages_held those got at least once (held now, released or timed out);
// Get and Peek merge ordered walks of both. expires_at rides along so that
// the expiry test of Get and Peek reads the index alone. They are two so
// that a drain touches each at one end: a Get takes messages_ready's first
// entries and appends to messages_held, a delete takes messages_held's
// first ones. In one index (versions 1 to 3) the held messages sat at its
// tail, beside the last messages put, and a Get and its delete split and
// merged the last leaves again and again (issue 34).
//
// A pop receipt is a random 64-bit integer, shown as 16 hex digits. Get
// draws a new one for the messages it returns (one per Get: a receipt names
// a message together with its id), UpdateVisibility draws another; Delete
// and UpdateVisibility succeed only with the current one. A receipt stays
// valid after its visibility timeout until the message is got again, as on
// Azure.
//
// Count is O(1): queues.depth counts the queue's rows, kept by every
// statement that adds or removes messages, in its transaction (Put, Delete,
// DeleteBatch, the purge, Clear); Count subtracts the expired messages not
// yet purged, an index probe of messages_expiry (a few µs at any depth).
//
// Expired messages are never returned and not counted. They are deleted
// lazily: at most once a second (of the DB's clock) per queue handle, a Get
// first deletes up to 256 expired messages, visible or not, found through
// messages_expiry; a full purge makes the next Get purge again.
//
// The schema is versioned with PRAGMA user_version and a list of migration
// steps applied in one transaction on Open: a file of version 1 is migrated
// to version 2 (bodies moved to their own table, depths counted) the first
// time a build of version 2 opens it (testdata/v1.db is such a file, and
// TestMigrateV1 its test). A file written by a newer version of this
// package is refused with ErrSchemaTooNew. A process of an older build
// that already has the file open when a newer one migrates it fails its
// Gets, Peeks and Depths from then on (version 4: "no query solution",
// TestV3ProcessFailsLoudlyOnV4): stop older processes before upgrading.
//
// # Space
//
// The file is in incremental auto-vacuum mode (a new file is born in it; an
// older file is converted once, by a full VACUUM, when it is first opened).
// Deleted messages' pages go on SQLite's free list, where new Puts reuse
// them. Each DB runs a vacuum loop: every second it reads the free list, and
// once half the file (and at least 256 KiB) is free it gives pages back to
// the file system with PRAGMA incremental_vacuum in steps of 8 MiB, each a
// short write transaction of its own (up to 8 a second, so Puts and Gets go
// on between them), then checkpoints and truncates the WAL. A drained file
// of a million messages is back to a few MiB within seconds, without a
// stop-the-world VACUUM. Close stops the loop.
//
// # Concurrency
//
// A DB holds two database/sql pools on the file. Every write (Put, Get,
// Delete, DeleteBatch, UpdateVisibility, Clear) goes through a pool of
// exactly one connection, so writers within a process queue up in Go rather
// than spin in SQLite's busy handler, and each statement is prepared once.
// Peek and Count read through a small pool of read-only connections, which
// WAL lets run beside the writer. A third pool of one connection runs
// checkpoints (see Durability). A Get reads its messages' bodies on the
// writer, in its transaction: a read connection drops its page cache and
// its mapping of the file each time another connection has written, which
// cost a Get that read there a cold cache every time (issue 34). Every
// connection maps the file into memory (mmapSize), so large bodies are
// read without a read call per page.
//
// Every operation is one statement or one transaction: a Get of n messages is
// one IMMEDIATE transaction (a SELECT of the first n visible messages with
// their bodies, then one UPDATE that hides them), so two consumers, in this
// process or another, never hold the same message within one visibility
// window; a DeleteBatch is
// one transaction (one DELETE … RETURNING per 32 receipts). Puts that arrive
// while another is being written wait in line and are then written together
// in one transaction (group commit): each Put still returns only once its
// message is committed, but concurrent producers share the cost of a commit. Explicit
// transactions begin IMMEDIATE (they take the write lock up front), so two
// processes never deadlock upgrading a read lock. A process that finds the
// file locked waits up to the busy timeout (DefaultBusyTimeout,
// WithBusyTimeout); an SQLITE_BUSY or SQLITE_LOCKED that outlasts it is
// returned marked queue.Transient, so callers retry.
//
// Two processes on one file take turns at the write lock (SQLite has one
// writer), so together they drain about as fast as one process does; in
// BENCHMARKS.md's runs their CPU per message matched one process's within
// the noise (0.95–1.09×), so sharing the file costs no measurable work per
// message. A process that finds the lock taken sleeps in SQLite's busy
// handler (1 ms, then longer) while the other keeps the lock busy.
// The vacuum loop counts another process's commits as activity (PRAGMA
// data_version), so it does not move pages under a drain running elsewhere.
//
// # Durability
//
// By default (SyncNormal) synchronous=NORMAL in WAL mode: a Put that
// returned survives a crash or kill of the process (the commit is in the
// WAL, in the operating system's hands); a power loss or OS crash may lose
// the transactions committed since the last checkpoint, but never corrupts
// the file. SQLite checkpoints once the WAL holds 1,000 pages, in the commit
// that takes it there, as by default; besides, every 50 write transactions
// the DB runs a passive checkpoint on a connection of its own, so that the
// writer seldom waits for a checkpoint's flushes (the WAL is flushed as
// often as before, or more). With WithSync(SyncFull) (URL: sync=full) every
// commit flushes the WAL to the disk before it returns (synchronous=FULL),
// so a Put that returned survives a power cut too; a commit then costs a
// flush, shared by the Puts of a group.
package sqlite
