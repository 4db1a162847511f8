package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// Transactional enqueue and settle (issue 30). The queue's tables live in
// the application's database, so a message can be put, and a handled
// message deleted, inside the application's own transaction:
//
//   - PutTx (pgx) and PutSQLTx (database/sql over pgx's stdlib driver) put
//     a message that exists if, and only if, the transaction commits. The
//     notification that wakes the consumers leaves after the commit, never
//     before and never for a rolled-back put: the first put of a notify
//     interval (DefaultNotifyInterval) notifies in its own statement, which
//     PostgreSQL sends at the commit; the others are watched
//     (awaitCommits): at the end of the interval one statement waits for
//     their transactions to end and one notification follows if any
//     committed. A notification per transaction would serialize the
//     commits (PostgreSQL takes a cluster-wide lock to queue one), which
//     halved the throughput of transactions that enqueue.
//   - DeleteTx and DeleteSQLTx delete a handler's message inside the
//     handler's transaction, so its writes and the delete commit or roll
//     back together; a stale receipt fails with queue.ErrReceiptMismatch
//     (the lease was lost: another consumer may hold the message), and the
//     handler decides (rolling back is right). Run by a listener, the
//     delete takes the newest receipt from the handler's context, stops
//     the message's renewal, and the listener then counts the message as
//     deleted without deleting it again.
//
// The transaction must be on the database (and schema) of the queue's DB:
// each put looks the queue up by id and name in its schema, and checks the
// database's name, so a transaction on another database fails with
// ErrOtherDatabase (which aborts it); a delete that deletes nothing makes
// the same check before it answers ErrNotFound or ErrReceiptMismatch, and
// fails with ErrOtherDatabase on another database (the caller rolls back). A database of the same name on
// another server, set up alike, is not told apart.
//
// Isolation: run the transaction READ COMMITTED (PostgreSQL's default).
// A put or delete updates one of the queue's counter rows, which every
// other put and delete of the queue updates too, and a delete also needs
// the message's row as its last renewal left it; in a REPEATABLE READ or
// SERIALIZABLE transaction whose snapshot predates such an update, the
// statement fails with a serialization failure (SQLSTATE 40001) and the
// transaction must be retried whole: with a few producers at work, most
// such puts fail (measured: 9 in 10 with 16 other producers' puts in
// between).
//
// Each call is one statement, so it works through PgBouncer in
// transaction pooling too (only Subscribe needs a session).

// ErrOtherDatabase: the transaction given to PutTx or DeleteTx is not on
// the queue's database (another database's name, or its schema lacks the
// queue's tables or the queue).
var ErrOtherDatabase = errors.New("postgres: the transaction is not on the queue's database")

// rowFunc runs one statement of a caller's transaction.
type rowFunc func(ctx context.Context, sql string, args ...any) interface{ Scan(...any) error }

func pgxRow(tx pgx.Tx) rowFunc {
	return func(ctx context.Context, sql string, args ...any) interface{ Scan(...any) error } {
		return tx.QueryRow(ctx, sql, args...)
	}
}

func sqlRow(tx *sql.Tx) rowFunc {
	return func(ctx context.Context, sql string, args ...any) interface{ Scan(...any) error } {
		return tx.QueryRowContext(ctx, sql, args...)
	}
}

// PutTx puts a message on q (a queue of this package) inside tx, with the
// checks of queue.Queue.Put (body size, TTL, delay). The message is
// visible, and the consumers woken, when tx commits; if tx rolls back,
// there never was a message.
func PutTx(ctx context.Context, tx pgx.Tx, q *queue.Queue, body []byte, opts queue.PutOptions) (string, error) {
	if tx == nil {
		return "", fmt.Errorf("postgres: put in transaction: %w: tx is nil", queue.ErrInvalidArgument)
	}
	return putTx(ctx, pgxRow(tx), q, body, opts)
}

// PutSQLTx is PutTx for a database/sql transaction over pgx's stdlib
// driver (github.com/jackc/pgx/v5/stdlib).
func PutSQLTx(ctx context.Context, tx *sql.Tx, q *queue.Queue, body []byte, opts queue.PutOptions) (string, error) {
	if tx == nil {
		return "", fmt.Errorf("postgres: put in transaction: %w: tx is nil", queue.ErrInvalidArgument)
	}
	return putTx(ctx, sqlRow(tx), q, body, opts)
}

// QueuePut adds a put of a message on q to b, a pgx.Batch that the caller
// sends in its transaction (tx.SendBatch) or that is one: "BEGIN", the
// application's statements, QueuePut, "COMMIT", sent with one SendBatch,
// one round trip for the whole transaction. The checks of PutTx are made
// now (an error leaves b unchanged); the put's own outcome is the result
// of its statement in the batch, and the message's id is stored in *id
// (if id is not nil) when that result is read. The message exists, and
// the consumers are woken, when the transaction commits, as with PutTx.
func QueuePut(ctx context.Context, b *pgx.Batch, q *queue.Queue, body []byte, opts queue.PutOptions, id *string) error {
	if b == nil {
		return fmt.Errorf("postgres: put in batch: %w: batch is nil", queue.ErrInvalidArgument)
	}
	pq, err := txQueue(ctx, q, "put")
	if err != nil {
		return err
	}
	// As Put: a span (of the queueing; the id comes with the batch's
	// results), the trace context in the metadata.
	_, opts, end := q.TracePut(ctx, body, opts)
	ttl, err := checkPut(q, body, opts)
	end("", err)
	if err != nil {
		return fmt.Errorf("postgres: put in batch %q: %w", q.Name(), err)
	}
	pq.queuePut(b, body, opts, ttl, id)
	return nil
}

// queuePut adds the statement of a checked put (ttl from checkPut) to b.
func (pq *pgQueue) queuePut(b *pgx.Batch, body []byte, opts queue.PutOptions, ttl int64, id *string) {
	if body == nil {
		body = []byte{}
	}
	db, st := pq.db, pq.st
	lim := &st.n
	notify := lim.claim(wallNow(), db.notify)
	stmt := db.sql.putTx
	if notify {
		stmt = db.sql.putTxNotify
	}
	b.Queue(stmt, db.nowArg(), st.id, micros(opts.InitialVisibilityDelay), ttl, body, driver.EncodeMetadata(opts.Metadata), db.channel, st.name, db.database).QueryRow(func(row pgx.Row) error {
		var n int64
		if err := row.Scan(&n); err != nil {
			if notify {
				lim.unclaim()
			}
			return pq.txErr("put", err)
		}
		if !notify {
			db.awaitCommits(st, n)
		}
		if id != nil {
			*id = strconv.FormatInt(n, 10)
		}
		return nil
	})
}

// PutBatchTx puts one message per body on q inside tx, in one round trip
// (the statements of QueuePut, sent as one batch), and returns their ids
// in order. Every body is checked first: one that fails the checks puts
// nothing. A failure of a statement fails the call and aborts tx, so a
// batch is put whole or not at all, at tx's commit.
func PutBatchTx(ctx context.Context, tx pgx.Tx, q *queue.Queue, bodies [][]byte, opts queue.PutOptions) ([]string, error) {
	if tx == nil {
		return nil, fmt.Errorf("postgres: put batch in transaction: %w: tx is nil", queue.ErrInvalidArgument)
	}
	if len(bodies) == 0 {
		if _, err := txQueue(ctx, q, "put batch"); err != nil {
			return nil, err
		}
		return []string{}, nil
	}
	// As PutBatch: one span, its trace context in each message's metadata
	// where it fits.
	ctx, inject, end := q.TracePutBatch(ctx, len(bodies))
	ids, err := putBatchTx(ctx, tx, q, bodies, opts, inject)
	if err != nil {
		end(nil, err)
		return nil, err
	}
	results := make([]queue.PutResult, len(ids))
	for i, id := range ids {
		results[i].ID = id
	}
	end(results, nil)
	return ids, nil
}

func putBatchTx(ctx context.Context, tx pgx.Tx, q *queue.Queue, bodies [][]byte, opts queue.PutOptions, inject func([]byte, queue.PutOptions) queue.PutOptions) ([]string, error) {
	pq, err := txQueue(ctx, q, "put batch")
	if err != nil {
		return nil, err
	}
	ttls := make([]int64, len(bodies))
	for i, body := range bodies {
		if ttls[i], err = checkPut(q, body, opts); err != nil {
			return nil, fmt.Errorf("postgres: put batch in transaction %q: body %d: %w", q.Name(), i, err)
		}
	}
	ids := make([]string, len(bodies))
	b := &pgx.Batch{}
	for i, body := range bodies {
		pq.queuePut(b, body, inject(body, opts), ttls[i], &ids[i])
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, markTransient(err)
	}
	return ids, nil
}

// DeleteTx deletes m, got from q, inside tx: nil once deleted there (it is
// gone when tx commits), queue.ErrReceiptMismatch if m's lease was lost,
// queue.ErrNotFound if m is gone. Called by a handler a listener runs, it
// uses the newest receipt (renewals change it) and settles the message for
// the listener.
func DeleteTx(ctx context.Context, tx pgx.Tx, q *queue.Queue, m *queue.Message) error {
	if tx == nil {
		return fmt.Errorf("postgres: delete in transaction: %w: tx is nil", queue.ErrInvalidArgument)
	}
	return deleteTx(ctx, pgxRow(tx), q, m)
}

// DeleteSQLTx is DeleteTx for a database/sql transaction over pgx's stdlib
// driver.
func DeleteSQLTx(ctx context.Context, tx *sql.Tx, q *queue.Queue, m *queue.Message) error {
	if tx == nil {
		return fmt.Errorf("postgres: delete in transaction: %w: tx is nil", queue.ErrInvalidArgument)
	}
	return deleteTx(ctx, sqlRow(tx), q, m)
}

// checkPut makes Queue.Put's checks (body, TTL, delay, metadata) and
// returns the TTL in microseconds (-1: none).
func checkPut(q *queue.Queue, body []byte, opts queue.PutOptions) (int64, error) {
	ttlD, err := queue.CheckPut(body, opts, q.MaxBodySize())
	if err == nil {
		err = driver.CheckMetadata(opts.Metadata, q.Features().Metadata, len(body), q.MaxBodySize())
	}
	if err != nil {
		return 0, err
	}
	if ttlD == queue.NoExpiry {
		return -1, nil
	}
	return micros(ttlD), nil
}

// txQueue finds the driver behind q.
func txQueue(ctx context.Context, q *queue.Queue, op string) (*pgQueue, error) {
	if q == nil {
		return nil, fmt.Errorf("postgres: %s in transaction: %w: queue is nil", op, queue.ErrInvalidArgument)
	}
	var db *DB
	if !q.As(&db) {
		return nil, fmt.Errorf("postgres: %s in transaction: %w: queue %q is not a PostgreSQL queue (%s)", op, queue.ErrInvalidArgument, q.Name(), q.Features().Name)
	}
	pq, err := db.queue(ctx, q.Name())
	if err != nil {
		return nil, err
	}
	if err := pq.check(); err != nil {
		return nil, err
	}
	return pq, nil
}

func putTx(ctx context.Context, row rowFunc, q *queue.Queue, body []byte, opts queue.PutOptions) (string, error) {
	ctx, opts, end := q.TracePut(ctx, body, opts) // as Put: a span, the trace context in the metadata
	id, err := putTxUntraced(ctx, row, q, body, opts)
	end(id, err)
	return id, err
}

func putTxUntraced(ctx context.Context, row rowFunc, q *queue.Queue, body []byte, opts queue.PutOptions) (string, error) {
	pq, err := txQueue(ctx, q, "put")
	if err != nil {
		return "", err
	}
	ttl, err := checkPut(q, body, opts)
	if err != nil {
		return "", fmt.Errorf("postgres: put in transaction %q: %w", q.Name(), err)
	}
	if body == nil {
		body = []byte{}
	}
	db, st := pq.db, pq.st
	// As Put, a put notifies in its own statement when the queue's
	// notify interval allows (the notification leaves at the commit);
	// the others leave their ids to the queue's next commit watch
	// (awaitCommits), which notifies once they have committed.
	lim := &st.n
	notify := lim.claim(wallNow(), db.notify)
	stmt := db.sql.putTx
	if notify {
		stmt = db.sql.putTxNotify
	}
	var id int64
	err = row(ctx, stmt, db.nowArg(), st.id, micros(opts.InitialVisibilityDelay), ttl, body, driver.EncodeMetadata(opts.Metadata), db.channel, st.name, db.database).Scan(&id)
	if err != nil {
		if notify {
			lim.unclaim()
		}
		return "", pq.txErr("put", err)
	}
	if !notify {
		db.awaitCommits(st, id)
	}
	return strconv.FormatInt(id, 10), nil
}

func deleteTx(ctx context.Context, row rowFunc, q *queue.Queue, m *queue.Message) error {
	pq, err := txQueue(ctx, q, "delete")
	if err != nil {
		return err
	}
	return queue.SettleTx(ctx, m, func(popReceipt string) error {
		n, ok := parseID(m.ID)
		if !ok {
			return fmt.Errorf("%w: id %q", queue.ErrNotFound, m.ID)
		}
		var receipt any
		if r, ok := parseReceipt(popReceipt); ok {
			receipt = r
		}
		var deleted, live sql.NullBool
		if err := row(ctx, pq.db.sql.delTx, pq.db.nowArg(), pq.st.id, n, receipt).Scan(&deleted, &live); err != nil {
			return pq.txErr("delete", err)
		}
		if deleted.Valid {
			pq.db.churned(2)
			if !deleted.Bool {
				return fmt.Errorf("%w: id %s expired", queue.ErrNotFound, m.ID)
			}
			return nil
		}
		// Nothing deleted: before it says the message is gone or its
		// receipt stale, make sure the transaction is on the queue's
		// database (a put checks this in its statement). A delete that
		// deleted was on it: the message's id and its random receipt
		// matched there.
		if err := pq.checkTxDatabase(ctx, row, "delete"); err != nil {
			return err
		}
		if !live.Valid {
			return outcome(m.ID, nil)
		}
		return outcome(m.ID, &live.Bool)
	})
}

// checkTxDatabase returns ErrOtherDatabase unless the caller's transaction
// is on q's database, and its schema holds q under its id and name. One
// statement, run only when a delete in the transaction deleted nothing,
// so a delete that succeeds costs no more.
func (q *pgQueue) checkTxDatabase(ctx context.Context, row rowFunc, op string) error {
	var ok bool
	err := row(ctx, `SELECT current_database() = $1::text AND EXISTS (SELECT 1 FROM `+quoteIdent(q.db.schema)+`.queues WHERE id = $2 AND name = $3)`,
		q.db.database, q.st.id, q.st.name).Scan(&ok)
	if err != nil {
		return q.txErr(op, err)
	}
	if !ok {
		return fmt.Errorf("%w: %s in transaction %q: the transaction's database is not %q, or its schema %q has no queue %q with id %d", ErrOtherDatabase, op, q.st.name, q.db.database, q.db.schema, q.st.name, q.st.id)
	}
	return nil
}

// txErr names what a statement in a caller's transaction found: the
// schema or the queue missing from the transaction's database
// (ErrOtherDatabase), or the server's error.
func (q *pgQueue) txErr(op string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "42P01" || pe.Code == "3F000": // undefined_table, invalid_schema_name
			return fmt.Errorf("%w: %s in transaction %q: schema %q has no queue tables there (%s)", ErrOtherDatabase, op, q.st.name, q.db.schema, pe.Message)
		case pe.Code == "23502" && pe.ColumnName == "queue_id": // not_null_violation: the lookup found no queue
			return fmt.Errorf("%w: %s in transaction %q: the transaction's database is not %q, or its schema %q has no queue %q with id %d", ErrOtherDatabase, op, q.st.name, q.db.database, q.db.schema, q.st.name, q.st.id)
		}
	}
	return markTransient(fmt.Errorf("postgres: %s in transaction %q: %w", op, q.st.name, err))
}

// markTransient marks an error of a statement in the caller's transaction
// as transient (driver.Transient) where the driver's classify says a retry
// may cure it: a serialization failure (40001) or a deadlock (40P01) in
// REPEATABLE READ or SERIALIZABLE, a lost connection. A Queue's own calls
// get this from Classify; PutTx and DeleteTx do not go through it, so
// queue.IsTransient would otherwise miss it and the caller's retry not run.
func markTransient(err error) error {
	if t, after := classify(err); t {
		return driver.Transient(err, after)
	}
	return err
}
