package sqlite

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// Transactional enqueue and settle (issue 30). The queues live in an
// ordinary SQLite file, so an application that keeps its own tables in the
// same file can put a message, or delete a handled one, inside its own
// transaction:
//
//   - PutTx puts a message that exists if, and only if, the transaction
//     commits.
//   - DeleteTx deletes a handler's message inside the handler's
//     transaction, so its writes and the delete commit or roll back
//     together (a stale receipt: queue.ErrReceiptMismatch, and the handler
//     rolls back). Run by a listener, it takes the newest receipt from the
//     handler's context and the listener counts the message as deleted
//     without deleting it again.
//
// The transaction must be on the DB's file (checked: ErrOtherDatabase).
// DB.SQL opens a *sql.DB on it with the DB's settings (WAL, busy timeout,
// BEGIN IMMEDIATE), whose commits that put messages wake the consumers of
// this process; the application's tables and the queues then share the
// file's one write lock, so keep transactions short.

// ErrOtherDatabase: the transaction given to PutTx or DeleteTx is not on
// the queue's database file.
var ErrOtherDatabase = errors.New("sqlite: the transaction is not on the queue's database file")

// Statements run in a caller's transaction (not prepared: they run on the
// caller's connections, which the DB does not own). Each call is wrapped in
// a savepoint, so a call that fails midway (a cancelled context, a full
// disk) leaves the caller's transaction as it was before it.
const (
	sqlMainFile  = `SELECT file FROM pragma_database_list WHERE name = 'main'`
	sqlSavepoint = `SAVEPOINT adaptq_tx`
	sqlRelease   = `RELEASE adaptq_tx`
	sqlUndo      = `ROLLBACK TO adaptq_tx`
)

// sameFiles caches the main files of callers' transactions found to be a
// DB's file (key: DB path + "\x00" + file).
var sameFiles sync.Map

// txQueue finds the driver behind q and checks that tx is on its file.
func txQueue(ctx context.Context, tx *sql.Tx, q *queue.Queue, op string) (*driverQueue, error) {
	if tx == nil {
		return nil, fmt.Errorf("sqlite: %s in transaction: %w: tx is nil", op, queue.ErrInvalidArgument)
	}
	if q == nil {
		return nil, fmt.Errorf("sqlite: %s in transaction: %w: queue is nil", op, queue.ErrInvalidArgument)
	}
	var db *DB
	if !q.As(&db) {
		return nil, fmt.Errorf("sqlite: %s in transaction: %w: queue %q is not an SQLite queue (%s)", op, queue.ErrInvalidArgument, q.Name(), q.Features().Name)
	}
	dq, err := db.queue(q.Name())
	if err != nil {
		return nil, fmt.Errorf("sqlite: %s in transaction %q: %w", op, q.Name(), err)
	}
	var file string
	if err := tx.QueryRowContext(ctx, sqlMainFile).Scan(&file); err != nil {
		return nil, fmt.Errorf("sqlite: %s in transaction %q: %w", op, q.Name(), db.mapErr(err))
	}
	if file != db.path {
		key := db.path + "\x00" + file
		if _, ok := sameFiles.Load(key); !ok {
			a, errA := os.Stat(file)
			b, errB := os.Stat(db.path)
			if file == "" || errA != nil || errB != nil || !os.SameFile(a, b) {
				return nil, fmt.Errorf("%w: %s in transaction %q: the transaction's file is %q, the queue's %q", ErrOtherDatabase, op, q.Name(), file, db.path)
			}
			sameFiles.Store(key, true)
		}
	}
	return dq, nil
}

// inSavepoint runs f inside a savepoint of tx.
func inSavepoint(ctx context.Context, tx *sql.Tx, f func() error) error {
	if _, err := tx.ExecContext(ctx, sqlSavepoint); err != nil {
		return err
	}
	if err := f(); err != nil {
		// Undone on a context of its own: the caller's may be what ended.
		bg := context.WithoutCancel(ctx)
		_, _ = tx.ExecContext(bg, sqlUndo)
		_, _ = tx.ExecContext(bg, sqlRelease)
		return err
	}
	_, err := tx.ExecContext(ctx, sqlRelease)
	return err
}

// PutTx puts a message on q (a queue of this package) inside tx, a
// transaction on the same database file, with the checks of
// queue.Queue.Put. The message is visible when tx commits; if tx rolls
// back, there never was a message. Consumers in this process are woken at
// the commit if tx belongs to a *sql.DB from DB.SQL; otherwise pull the
// queue's trigger after the commit.
func PutTx(ctx context.Context, tx *sql.Tx, q *queue.Queue, body []byte, opts queue.PutOptions) (string, error) {
	ctx, opts, end := q.TracePut(ctx, body, opts) // as Put: a span, the trace context in the metadata
	id, err := putTx(ctx, tx, q, body, opts)
	end(id, err)
	return id, err
}

func putTx(ctx context.Context, tx *sql.Tx, q *queue.Queue, body []byte, opts queue.PutOptions) (string, error) {
	dq, err := txQueue(ctx, tx, q, "put")
	if err != nil {
		return "", err
	}
	ttl, err := queue.CheckPut(body, opts, q.MaxBodySize())
	if err == nil {
		err = driver.CheckMetadata(opts.Metadata, q.Features().Metadata, len(body), q.MaxBodySize())
	}
	if err != nil {
		return "", fmt.Errorf("sqlite: put in transaction %q: %w", q.Name(), err)
	}
	now := dq.now()
	exp := int64(noExpiry)
	if ttl != queue.NoExpiry {
		exp = satAdd(now, ttl)
	}
	if body == nil {
		body = []byte{}
	}
	var id int64
	err = inSavepoint(ctx, tx, func() error {
		res, err := tx.ExecContext(ctx, sqlPut, dq.qid, now, now+int64(opts.InitialVisibilityDelay), exp)
		if err != nil {
			return err
		}
		if id, err = res.LastInsertId(); err != nil {
			return err
		}
		if meta := driver.EncodeMetadata(opts.Metadata); meta != nil {
			if _, err := tx.ExecContext(ctx, sqlPutBodyMeta, id, body, meta); err != nil {
				return err
			}
		} else if _, err := tx.ExecContext(ctx, sqlPutBody, id, body); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, sqlDepth, dq.qid, 1)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("sqlite: put in transaction %q: %w", q.Name(), dq.fail(err))
	}
	return strconv.FormatInt(id, 10), nil
}

// DeleteTx deletes m, got from q, inside tx: nil once deleted there (it is
// gone when tx commits), queue.ErrReceiptMismatch if m's lease was lost,
// queue.ErrNotFound if m is gone or expired. Called by a handler a listener
// runs, it uses the newest receipt and settles the message for the
// listener.
func DeleteTx(ctx context.Context, tx *sql.Tx, q *queue.Queue, m *queue.Message) error {
	dq, err := txQueue(ctx, tx, q, "delete")
	if err != nil {
		return err
	}
	return queue.SettleTx(ctx, m, func(popReceipt string) error {
		mid, ok := parseID(m.ID)
		if !ok {
			return notFound(m.ID)
		}
		now := dq.now()
		r, ok := parseReceipt(popReceipt)
		if !ok {
			return dq.missedTx(ctx, tx, m.ID, mid, now)
		}
		var exp int64
		deleted := false
		err := inSavepoint(ctx, tx, func() error {
			err := tx.QueryRowContext(ctx, sqlDelete, dq.qid, mid, r).Scan(&exp)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				return nil
			case err != nil:
				return err
			}
			deleted = true
			if _, err := tx.ExecContext(ctx, sqlDeleteBodies(1), mid); err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, sqlDepth, dq.qid, -1)
			return err
		})
		switch {
		case err != nil:
			return fmt.Errorf("sqlite: delete in transaction %q: %w", q.Name(), dq.fail(err))
		case deleted && exp > now:
			return nil
		case deleted:
			return notFound(m.ID) // expired: gone, and deleted with the transaction
		}
		return dq.missedTx(ctx, tx, m.ID, mid, now)
	})
}

// missedTx is missed, read inside tx.
func (q *driverQueue) missedTx(ctx context.Context, tx *sql.Tx, id string, mid, now int64) error {
	var exp int64
	err := tx.QueryRowContext(ctx, sqlExists, q.qid, mid).Scan(&exp)
	switch {
	case err == nil && exp > now:
		return fmt.Errorf("%w: message %s has a newer pop receipt", queue.ErrReceiptMismatch, id)
	case err == nil, errors.Is(err, sql.ErrNoRows):
		return notFound(id)
	default:
		return q.fail(err)
	}
}

// SQL opens a *sql.DB on the DB's file for the application's own tables
// and transactions, with the DB's settings: WAL, its busy timeout and
// sync, transactions that begin IMMEDIATE (they take the write lock at
// BEGIN, so two writers never deadlock upgrading a read lock; the DB's
// own writes wait for them up to the busy timeout, and theirs for the
// DB's). Close it before the DB.
//
// When one of its transactions that inserted messages commits, onCommit
// (if not nil) is called with the name of each queue concerned, from
// inside the commit: it must not block nor use the database. Pass a push
// trigger's Notify (listener.LocalNotifier.Notify, or a func calling
// adaptq.Worker.Trigger) so that the consumers of this process wake at the
// commit; a consumer woken then finds the message, since its Get waits for
// the commit to release the write lock.
func (db *DB) SQL(onCommit func(queueName string)) (*sql.DB, error) {
	if db.closed.Load() {
		return nil, queue.ErrClosed
	}
	c, err := sqlite.NewConnector(dsn(db.path, strconv.FormatInt(db.busyTimeout.Milliseconds(), 10), db.sync, false))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s for the application: %w", db.path, err)
	}
	return sql.OpenDB(&wakeConnector{Connector: c, db: db, onCommit: onCommit}), nil
}

// wakeConnector hooks every connection it opens: inserts into messages are
// noted (the pre-update hook), and at the commit the queues noted are
// passed to onCommit; a rollback forgets them.
type wakeConnector struct {
	sqldriver.Connector
	db       *DB
	onCommit func(string)
}

func (c *wakeConnector) Connect(ctx context.Context) (sqldriver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil || c.onCommit == nil {
		return conn, err
	}
	h, ok := conn.(sqlite.HookRegisterer)
	if !ok {
		return conn, nil
	}
	var (
		mu      sync.Mutex
		pending []int64 // queue ids put to in the open transaction
		row     = make([]any, 2)
	)
	h.RegisterPreUpdateHook(func(d sqlite.SQLitePreUpdateData) {
		if d.Op != sqlite3.SQLITE_INSERT || d.TableName != "messages" || d.DatabaseName != "main" {
			return
		}
		if err := d.New(row...); err != nil {
			return
		}
		qid, ok := row[1].(int64)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, p := range pending {
			if p == qid {
				return
			}
		}
		pending = append(pending, qid)
	})
	h.RegisterCommitHook(func() int32 {
		mu.Lock()
		ids := pending
		pending = nil
		mu.Unlock()
		for _, id := range ids {
			if name, ok := c.db.queueName(id); ok {
				c.onCommit(name)
			}
		}
		return 0
	})
	h.RegisterRollbackHook(func() {
		mu.Lock()
		pending = nil
		mu.Unlock()
	})
	return conn, nil
}

// queueName is the name of the queue whose queues.id is id, among those
// this process has opened.
func (db *DB) queueName(id int64) (string, bool) {
	db.mu.Lock()
	defer db.mu.Unlock()
	for name, qid := range db.queues {
		if qid == id {
			return name, true
		}
	}
	return "", false
}
