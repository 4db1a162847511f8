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
//
// Within one process, every URL naming the same file shares one DB, which is
// closed when the last queue opened that way is closed.
//
// # File layout
//
// Source files: doc.go (this), db.go (Open, options, connection pools,
// prepared statements), schema.go (the versioned schema and its migrations),
// queue.go (the queue.Queue implementation and its SQL), group.go (Puts
// sharing commits), url.go (the sqlite:// scheme).
//
// The database file is an ordinary SQLite database in WAL mode: name.db plus
// name.db-wal and name.db-shm beside it while it is open. Its header carries
// application_id 0x61647471 ("adtq") and user_version = the schema version.
//
// # Schema (version 1)
//
//	queues(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE, created_at INTEGER)
//	messages(id INTEGER PRIMARY KEY AUTOINCREMENT, queue_id INTEGER,
//	         inserted_at INTEGER, visible_at INTEGER, expires_at INTEGER,
//	         dequeue_count INTEGER, receipt INTEGER, body BLOB)
//	INDEX messages_ready ON messages(queue_id, visible_at, id, expires_at)
//
// Times are absolute Unix nanoseconds read from the DB's queue.Clock, so
// tests move a fake clock instead of sleeping, and a restart (or another
// process) sees the same deadlines. A message put with queue.NoExpiry has
// expires_at = math.MaxInt64. Message ids are the decimal text of
// messages.id; AUTOINCREMENT guarantees that an id is never handed out again,
// not after deleting the newest message and not after Clear, because handlers
// key their idempotency on it.
//
// The index orders each queue's messages as Get takes them, oldest
// visible_at first and then by id (FIFO); expires_at rides along so that the
// expiry test of Get, Peek and Count and the purge of expired messages read
// the index alone.
//
// A pop receipt is a random 64-bit integer, shown as 16 hex digits. Get
// draws a new one per message (SQLite's random()), UpdateVisibility draws
// another; Delete and UpdateVisibility succeed only with the current one. A
// receipt stays valid after its visibility timeout until the message is got
// again, as on Azure. The low 6 bits of a receipt drawn by Get hold the
// message's position in its batch, which is how the one-statement Get
// returns its messages in FIFO order (SQLite does not order RETURNING rows).
//
// Count scans the queue's part of the index (about 1 ms per 10,000
// messages), so it is meant for periodic sampling, not for every Get.
//
// Expired messages are never returned and not counted. They are deleted
// lazily: at most once a second (of the DB's clock) per queue handle, a Get
// first deletes the expired ones among the first 256 visible messages, the
// only ones a Get has to step over; a full purge makes the next Get purge
// again.
//
// The schema is versioned with PRAGMA user_version and a list of migration
// steps applied in one transaction on Open. A file written by a newer
// version of this package is refused with ErrSchemaTooNew.
//
// # Concurrency
//
// A DB holds two database/sql pools on the file. Every write (Put, Get,
// Delete, DeleteBatch, UpdateVisibility, Clear) goes through a pool of
// exactly one connection, so writers within a process queue up in Go rather
// than spin in SQLite's busy handler, and each statement is prepared once.
// Peek and Count read through a small pool of read-only connections, which
// WAL lets run beside the writer.
//
// Every operation is one statement or one transaction: a Get of n messages is
// a single UPDATE … RETURNING, so two consumers, in this process or another,
// never hold the same message within one visibility window; a DeleteBatch is
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
// # Durability
//
// synchronous=NORMAL in WAL mode: a Put that returned survives a crash or
// kill of the process (the commit is in the WAL, in the operating system's
// hands); a power loss or OS crash may lose the transactions committed since
// the last checkpoint, but never corrupts the file.
package sqlite
