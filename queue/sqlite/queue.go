package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// Lazy deletion of expired messages (see the package doc).
const (
	// purgeLimit is how many of the first visible messages one purge looks
	// at: a bounded, index-only scan of the messages a Get steps over.
	purgeLimit = 256
	// purgeInterval is how often (in the DB's clock) a queue handle purges,
	// unless the previous purge was full.
	purgeInterval = time.Second
)

// noExpiry is expires_at for a message put with queue.NoExpiry.
const noExpiry = math.MaxInt64

// The statements. ?1 is always the queue's queues.id.
const (
	sqlEnsureQueue = `INSERT INTO queues (name, created_at) VALUES (?1, ?2)
		ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING id`

	// A Put is sqlPut and then sqlPutBody with the new id, and sqlDepth
	// for the queue, in one transaction (a group of Puts: one sqlDepth per
	// queue).
	sqlPut = `INSERT INTO messages (queue_id, inserted_at, visible_at, expires_at)
		VALUES (?1, ?2, ?3, ?4)`
	sqlPutBody = `INSERT INTO bodies (id, body) VALUES (?1, ?2)`
	// sqlPutBodyMeta is sqlPutBody for a message with metadata: one without
	// runs the statement it ran before metadata existed.
	sqlPutBodyMeta = `INSERT INTO bodies (id, body, meta) VALUES (?1, ?2, ?3)`

	// sqlDepth adds ?2 to the queue's depth. Every statement that adds or
	// removes messages runs it in its transaction, with the number of
	// rows it changed: a per-row trigger would cost a quarter of a drain.
	sqlDepth = `UPDATE queues SET depth = depth + ?2 WHERE id = ?1`

	// A Get is, in one write transaction, sqlGetSelect, which reads the
	// first ?3 visible, unexpired messages at ?2 with their bodies in FIFO
	// order, and then sqlGetHide for their ids. It writes the messages
	// rows only, never a body. The bodies are read on the writer, inside
	// the transaction: its page cache is warm, while a read connection
	// drops its cache and unmaps the file each time the writer has written.
	//
	// Visible messages are in two indexes (schema version 4): never got
	// (messages_ready) and got before, released or timed out
	// (messages_held). sqlGetSelect merges ordered walks of both (each
	// probing bodies per message) by (visible_at, id), its last column,
	// which the Get ignores: no sort, and a walk stops at the limit.
	sqlGetSelect = `SELECT m.id, m.dequeue_count, m.inserted_at, m.expires_at, b.body, b.meta, m.visible_at
		FROM messages AS m INDEXED BY messages_ready JOIN bodies AS b ON b.id = m.id
		WHERE m.queue_id = ?1 AND m.receipt IS NULL AND m.visible_at <= ?2 AND m.expires_at > ?2
		UNION ALL
		SELECT m.id, m.dequeue_count, m.inserted_at, m.expires_at, b.body, b.meta, m.visible_at
		FROM messages AS m INDEXED BY messages_held JOIN bodies AS b ON b.id = m.id
		WHERE m.queue_id = ?1 AND m.receipt IS NOT NULL AND m.visible_at <= ?2 AND m.expires_at > ?2
		ORDER BY 7, 1 LIMIT ?3`

	// In the statements that name ids, +queue_id keeps the planner on the
	// primary key (see sqlDeleteBatch). A message deleted from messages
	// has its body deleted (sqlDeleteBodies) and its queue's depth
	// lowered (sqlDepth) in the same transaction.
	sqlDelete = `DELETE FROM messages WHERE id = ?2 AND +queue_id = ?1 AND receipt = ?3 RETURNING expires_at`

	// sqlExists tells a stale receipt (the message is there, unexpired) from
	// a message that is gone.
	sqlExists = `SELECT expires_at FROM messages WHERE id = ?2 AND +queue_id = ?1`

	sqlUpdateVisibility = `UPDATE messages SET visible_at = ?4, receipt = random()
		WHERE id = ?2 AND +queue_id = ?1 AND receipt = ?3 AND expires_at > ?5
		RETURNING receipt`

	// sqlPurgeBodies and then sqlPurge delete up to ?3 expired messages,
	// visible or not, read from messages_expiry (the same ones: one
	// transaction, one order).
	sqlPurgeBodies = `DELETE FROM bodies WHERE id IN (
		SELECT id FROM messages INDEXED BY messages_expiry
		WHERE queue_id = ?1 AND expires_at <= ?2 LIMIT ?3)`
	sqlPurge = `DELETE FROM messages WHERE id IN (
		SELECT id FROM messages INDEXED BY messages_expiry
		WHERE queue_id = ?1 AND expires_at <= ?2 LIMIT ?3)`

	sqlClearBodies = `DELETE FROM bodies WHERE id IN (SELECT id FROM messages WHERE queue_id = ?1)`
	sqlClear       = `DELETE FROM messages WHERE queue_id = ?1`
	sqlClearDepth  = `UPDATE queues SET depth = 0 WHERE id = ?1`

	// sqlPeek is sqlGetSelect without the write: the same merge of the
	// two indexes.
	sqlPeek = `SELECT m.id, b.body, b.meta, m.dequeue_count, m.inserted_at, m.expires_at, m.visible_at
		FROM messages AS m INDEXED BY messages_ready JOIN bodies AS b ON b.id = m.id
		WHERE m.queue_id = ?1 AND m.receipt IS NULL AND m.visible_at <= ?2 AND m.expires_at > ?2
		UNION ALL
		SELECT m.id, b.body, b.meta, m.dequeue_count, m.inserted_at, m.expires_at, m.visible_at
		FROM messages AS m INDEXED BY messages_held JOIN bodies AS b ON b.id = m.id
		WHERE m.queue_id = ?1 AND m.receipt IS NOT NULL AND m.visible_at <= ?2 AND m.expires_at > ?2
		ORDER BY 7, 1 LIMIT ?3`

	// sqlPeekAfter is a page of PeekAfter: the visible, unexpired messages
	// whose id is above ?4, in id order (the order they were put). It
	// walks the rowid (messages.id) up from the cursor and stops at the
	// page's end: NOT INDEXED keeps the planner off messages_ready, which
	// would read every visible message of the queue and sort them for each
	// page (a listing of N messages cost N²/page). The walk steps over other
	// queues' messages between the cursor and the page's last message, so a
	// whole listing reads the rows above its first message once, and a page
	// of a queue whose messages are sparse among others' may read many rows.
	// An index (queue_id, id) was measured and rejected: +12 % instructions
	// per Put and +14 % per message filled and drained (bench/throughput.md).
	sqlPeekAfter = `SELECT m.id, b.body, b.meta, m.dequeue_count, m.inserted_at, m.expires_at, m.visible_at
		FROM messages AS m NOT INDEXED JOIN bodies AS b ON b.id = m.id
		WHERE m.queue_id = ?1 AND m.id > ?4 AND m.visible_at <= ?2 AND m.expires_at > ?2
		ORDER BY m.id LIMIT ?3`

	// sqlCount is the queue's depth, kept by sqlDepth, less the
	// expired messages not yet purged: O(1) plus one index probe (the
	// purge keeps the expired ones few).
	sqlCount = `SELECT depth - (SELECT count(*) FROM messages INDEXED BY messages_expiry
		                    WHERE queue_id = ?1 AND expires_at <= ?2)
		FROM queues WHERE id = ?1`
)

// The statements of a batch take anonymous parameters (?): SQLite looks a
// numbered one (?12) up by a walk of the statement's list of names each
// time it is bound, which for the 97 parameters of a delete of 32 came to
// about 1,300 instructions per message drained (issue 34).

// sqlDeleteBatch deletes n (id, receipt) pairs in one statement; its
// parameters are the queue's id, the n ids, then the n pairs (id,
// receipt) again (deleteBatchArgs); ids must be distinct. The unary + on
// queue_id keeps the planner on the primary key: without it SQLite may
// prefer messages_ready and scan the whole queue.
func sqlDeleteBatch(n int) string {
	return "DELETE FROM messages WHERE +queue_id = ? AND id IN (" + params(n) +
		") AND receipt = CASE id" + strings.Repeat(" WHEN ? THEN ?", n) + " END RETURNING id, expires_at"
}

// sqlDeleteBatchOne is sqlDeleteBatch for n ids that share one receipt,
// as the messages of one Get do: its parameters are the queue's id, the
// receipt and the n ids, and it compares each row's receipt with one
// value instead of walking a CASE of n branches.
func sqlDeleteBatchOne(n int) string {
	return "DELETE FROM messages WHERE +queue_id = ? AND receipt = ? AND id IN (" + params(n) + ") RETURNING id, expires_at"
}

// deleteBatchArgs are sqlDeleteBatch's arguments for qid and pairs (id,
// receipt, id, receipt …).
func deleteBatchArgs(qid int64, pairs []any) []any {
	n := len(pairs) / 2
	args := make([]any, 0, 1+3*n)
	args = append(args, qid)
	for i := range n {
		args = append(args, pairs[2*i])
	}
	return append(args, pairs...)
}

// sqlGetHide hides n messages got by a Get (NULL ids match nothing): its
// parameters are the time they become visible, their new receipt and
// their n ids. It raises their dequeue counts.
func sqlGetHide(n int) string {
	return "UPDATE messages SET visible_at = ?, dequeue_count = dequeue_count + 1, receipt = ? WHERE id IN (" + params(n) + ")"
}

// sqlDeleteBodies deletes the bodies of n messages, its n parameters (NULL
// ids match nothing).
func sqlDeleteBodies(n int) string {
	return "DELETE FROM bodies WHERE id IN (" + params(n) + ")"
}

// params is n anonymous parameters, comma-separated.
func params(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// sqlExistsBatch is sqlExists for up to queue.MaxBatchSize ids, ?3 … ?34
// (unused ones NULL); ?2 is now.
var sqlExistsBatch = func() string {
	var in strings.Builder
	for i := range queue.MaxBatchSize {
		if i > 0 {
			in.WriteString(", ")
		}
		fmt.Fprintf(&in, "?%d", 3+i)
	}
	return "SELECT id FROM messages WHERE +queue_id = ?1 AND expires_at > ?2 AND id IN (" + in.String() + ")"
}()

// driverQueue is the driver of one queue of a DB (a driver.Queue); the
// portable queue.Queue wraps it. It is safe for concurrent use.
type driverQueue struct {
	db   *DB
	name string
	qid  int64

	onClose   func() error // releases a DB shared by URL opens; nil otherwise
	sharedKey string       // the shared DB's key when opened by URL
	nextPurge atomic.Int64 // Unix ns of the DB clock
}

var _ driver.Queue = (*driverQueue)(nil)

// Name returns the queue's name.
func (q *driverQueue) Name() string { return q.name }

// Features: every capability but native notify; a durable file (a power
// cut too with SyncFull).
func (q *driverQueue) Features() driver.Features {
	durability := driver.ProcessCrash
	if q.db.sync == SyncFull {
		durability = driver.PowerLoss
	}
	return driver.Features{
		Name:        Scheme,
		MaxBatch:    queue.MaxBatchSize,
		MaxPeek:     queue.MaxPeek,
		MaxBody:     q.db.maxBody,
		ExactCount:  true,
		BatchDelete: true,
		Siblings:    true,
		Durability:  durability,
		Metadata:    driver.DefaultMetadataLimits,
	}
}

// Close releases the handle; the DB stays open (unless the queue was opened
// by URL and is the last one on its file). The portable queue calls it
// once.
func (q *driverQueue) Close() error {
	if q.onClose != nil {
		return q.onClose()
	}
	return nil
}

// Classify: mapErr marks SQLITE_BUSY and SQLITE_LOCKED transient.
func (q *driverQueue) Classify(err error) (bool, time.Duration) { return driver.DefaultClassify(err) }

// As gives the queue's *DB to a *(*DB) target.
func (q *driverQueue) As(target any) bool {
	if p, ok := target.(**DB); ok {
		*p = q.db
		return true
	}
	return false
}

// Subscribe is not supported: SQLite has no notification across processes.
func (q *driverQueue) Subscribe(context.Context) (<-chan struct{}, error) {
	return nil, driver.ErrUnsupported
}

// fail maps an error of the database.
func (q *driverQueue) fail(err error) error { return q.db.mapErr(err) }

// now reads the DB's clock as Unix nanoseconds.
func (q *driverQueue) now() int64 { return q.db.clock.Now().UnixNano() }

// Put adds a message and returns its id.
func (q *driverQueue) Put(ctx context.Context, body []byte, opts driver.PutOptions) (string, error) {
	id, err := q.db.put(ctx, q.request(body, opts, q.now()))
	if err != nil {
		return "", q.fail(err)
	}
	return strconv.FormatInt(id, 10), nil
}

// request is the row a Put of body with opts writes at now: what Put and
// PutBatch share.
func (q *driverQueue) request(body []byte, opts driver.PutOptions, now int64) *putReq {
	exp := int64(noExpiry)
	if opts.TTL != driver.NoExpiry {
		exp = satAdd(now, opts.TTL)
	}
	if body == nil {
		body = []byte{} // the column is NOT NULL
	}
	return &putReq{
		qid:        q.qid,
		insertedAt: now,
		visibleAt:  now + int64(opts.InitialVisibilityDelay),
		expiresAt:  exp,
		body:       body,
		meta:       driver.EncodeMetadata(opts.Metadata),
	}
}

var _ driver.PutBatcher = (*driverQueue)(nil)

// PutBatch writes the messages in one transaction: all of them, under ids
// in their order, or none. Like a group of Puts it runs to its commit once
// begun, whatever becomes of ctx.
func (q *driverQueue) PutBatch(ctx context.Context, reqs []driver.PutRequest) ([]string, []error, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	now := q.now()
	group := make([]*putReq, len(reqs))
	for i, r := range reqs {
		group[i] = q.request(r.Body, r.Opts, now)
	}
	rows, err := q.db.insert(group)
	if err != nil {
		return nil, nil, q.fail(err)
	}
	ids := make([]string, len(rows))
	for i, id := range rows {
		ids[i] = strconv.FormatInt(id, 10)
	}
	return ids, make([]error, len(reqs)), nil
}

// Get returns up to n visible messages in FIFO order, each hidden until
// now+visibility with a new receipt and its dequeue count incremented: one
// write transaction, which reads the messages with their bodies and then
// hides them. The messages of one Get share their receipt, a random
// number drawn for it; a receipt names a message together with its id.
func (q *driverQueue) Get(ctx context.Context, n int, visibility time.Duration) ([]*driver.Message, error) {
	now := q.now()
	// Once begun, the get runs to its end whatever becomes of ctx, so that
	// it never hides messages it does not return. The busy timeout bounds
	// it.
	ctx = context.WithoutCancel(ctx)
	q.purge(ctx, now)
	msgs, err := q.db.get(ctx, q.qid, now, now+int64(visibility), n)
	if err != nil {
		return nil, q.fail(err)
	}
	return msgs, nil
}

// get is Get's transaction.
func (db *DB) get(ctx context.Context, qid, now, visibleAt int64, n int) ([]*driver.Message, error) {
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	rows, err := tx.StmtContext(ctx, db.st.getSelect).QueryContext(ctx, qid, now, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	receipt := newReceipt()
	pr := formatReceipt(receipt)
	next := fromNanos(visibleAt)
	var (
		backing []driver.Message
		msgs    []*driver.Message
		args    []any
	)
	var cols [4]any // id, dequeue_count, inserted_at, expires_at: see ints
	var vis any     // visible_at, the merge's order: not read
	for rows.Next() {
		// RawBytes: the driver already copied the BLOB into a slice of
		// its own for this row, which a []byte destination would make
		// database/sql clone. The Get keeps the driver's copy
		// (TestGotBodiesAreTheirOwn checks that nothing reuses it).
		var raw, meta sql.RawBytes // meta is NULL for most messages
		if err := rows.Scan(&cols[0], &cols[1], &cols[2], &cols[3], &raw, &meta, &vis); err != nil {
			return nil, err
		}
		var v [4]int64
		if err := ints(cols[:], v[:]); err != nil {
			return nil, err
		}
		md, err := driver.DecodeMetadata(meta) // nil for none; decoded before the next row
		if err != nil {
			return nil, err
		}
		id, dc, ins, exp := v[0], v[1], v[2], v[3]
		body := []byte(raw)
		if backing == nil {
			backing = make([]driver.Message, 0, n)
			msgs = make([]*driver.Message, 0, n)
			args = make([]any, 2, 2+n)
		}
		if body == nil {
			body = []byte{}
		}
		backing = append(backing, driver.Message{
			ID:            strconv.FormatInt(id, 10),
			Body:          body,
			Metadata:      md,
			PopReceipt:    pr,
			DequeueCount:  int(dc) + 1,
			InsertedAt:    fromNanos(ins),
			ExpiresAt:     fromExpiry(exp),
			NextVisibleAt: next,
		})
		msgs = append(msgs, &backing[len(backing)-1])
		args = append(args, id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	if len(msgs) == 0 {
		return nil, nil // nothing written: the rollback ends the transaction
	}
	args[0], args[1] = visibleAt, receipt
	c := bits.Len(uint(len(msgs) - 1)) // ceil(log2(len)); len ≤ MaxBatchSize
	for range 1<<c - len(msgs) {
		args = append(args, nil) // NULL ids match nothing
	}
	if _, err := tx.StmtContext(ctx, db.st.getHide[c]).ExecContext(ctx, args...); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	db.committed()
	return msgs, nil
}

// ints reads INTEGER columns scanned into *any: database/sql hands an
// int64 to an *any as it is, where an *int64 destination takes a
// reflection-based conversion per column (a few hundred instructions,
// several times per message of a drain).
func ints(cols []any, v []int64) error {
	for i, c := range cols {
		n, ok := c.(int64)
		if !ok {
			return fmt.Errorf("sqlite: column %d is %T, want an integer", i, c)
		}
		v[i] = n
	}
	return nil
}

// newReceipt draws a Get's receipt.
func newReceipt() int64 { return int64(rand.Uint64()) }

// purge deletes expired messages at the head of the queue, at most once per
// purgeInterval unless the last purge was full. It is opportunistic: an
// error is left for the Get that follows to meet.
func (q *driverQueue) purge(ctx context.Context, now int64) {
	next := q.nextPurge.Load()
	if now < next || !q.nextPurge.CompareAndSwap(next, now+int64(purgeInterval)) {
		return
	}
	n, err := q.db.purge(ctx, q.qid, now)
	if err != nil {
		q.nextPurge.Store(now) // try again on the next Get
		return
	}
	if n >= purgeLimit {
		q.nextPurge.Store(now) // more to delete
	}
}

// purge deletes up to purgeLimit expired messages of the queue qid and
// returns how many it deleted.
func (db *DB) purge(ctx context.Context, qid, now int64) (int64, error) {
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.StmtContext(ctx, db.st.purgeBodies).ExecContext(ctx, qid, now, purgeLimit); err != nil {
		return 0, err
	}
	res, err := tx.StmtContext(ctx, db.st.purge).ExecContext(ctx, qid, now, purgeLimit)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return 0, err // nothing to commit
	}
	if _, err := tx.StmtContext(ctx, db.st.depth).ExecContext(ctx, qid, -n); err != nil {
		return 0, err
	}
	return n, tx.Commit()
}

// Delete removes a message held with its newest receipt. A stale receipt is
// queue.ErrReceiptMismatch; an unknown, deleted or expired id is
// queue.ErrNotFound.
func (q *driverQueue) Delete(ctx context.Context, id, popReceipt string) error {
	mid, ok := parseID(id)
	if !ok {
		return notFound(id)
	}
	now := q.now()
	r, ok := parseReceipt(popReceipt)
	if ok {
		exp, deleted, err := q.deleteOne(ctx, mid, r)
		switch {
		case err != nil:
			return q.fail(err)
		case deleted && exp > now:
			return nil
		case deleted:
			return notFound(id) // expired: gone, and now deleted too
		}
	}
	return q.missed(ctx, q.db.st.exists, id, mid, now)
}

// deleteOne deletes message mid if r is its receipt, with its body, and
// lowers the depth, in one transaction. It returns the message's expiry and
// whether it was deleted.
func (q *driverQueue) deleteOne(ctx context.Context, mid, r int64) (exp int64, deleted bool, err error) {
	tx, err := q.db.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, false, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	err = tx.StmtContext(ctx, q.db.st.del).QueryRowContext(ctx, q.qid, mid, r).Scan(&exp)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil // nothing written: the rollback ends the transaction
	case err != nil:
		return 0, false, err
	}
	if err := q.gone(ctx, tx, []int64{mid}); err != nil {
		return 0, false, err
	}
	return exp, true, tx.Commit()
}

// gone finishes, inside tx, the deletion of messages ids (already deleted
// from messages): it deletes their bodies and lowers the queue's depth.
func (q *driverQueue) gone(ctx context.Context, tx *sql.Tx, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	for start := 0; start < len(ids); start += queue.MaxBatchSize {
		chunk := ids[start:min(start+queue.MaxBatchSize, len(ids))]
		c := bits.Len(uint(len(chunk) - 1)) // ceil(log2(len))
		args := make([]any, 1<<c)           // padded with NULLs
		for i, id := range chunk {
			args[i] = id
		}
		if _, err := tx.StmtContext(ctx, q.db.st.delBodies[c]).ExecContext(ctx, args...); err != nil {
			return err
		}
	}
	_, err := tx.StmtContext(ctx, q.db.st.depth).ExecContext(ctx, q.qid, -int64(len(ids)))
	return err
}

// missed explains why an id and receipt matched nothing: the message is
// there (a stale receipt) or it is not (not found).
func (q *driverQueue) missed(ctx context.Context, exists *sql.Stmt, id string, mid, now int64) error {
	var exp int64
	err := exists.QueryRowContext(ctx, q.qid, mid).Scan(&exp)
	switch {
	case err == nil && exp > now:
		return fmt.Errorf("%w: message %s has a newer pop receipt", driver.ErrReceiptMismatch, id)
	case err == nil, errors.Is(err, sql.ErrNoRows):
		return notFound(id)
	default:
		return q.fail(err)
	}
}

func notFound(id string) error {
	return fmt.Errorf("%w: message %q", driver.ErrNotFound, id)
}

// UpdateVisibility hides a held message until now+d (d = 0 releases it) and
// returns its new receipt; the old one becomes stale.
func (q *driverQueue) UpdateVisibility(ctx context.Context, id, popReceipt string, d time.Duration) (string, error) {
	mid, ok := parseID(id)
	if !ok {
		return "", notFound(id)
	}
	now := q.now()
	if r, ok := parseReceipt(popReceipt); ok {
		var nr int64
		err := q.db.st.update.QueryRowContext(ctx, q.qid, mid, r, now+int64(d), now).Scan(&nr)
		switch {
		case err == nil:
			return formatReceipt(nr), nil
		case !errors.Is(err, sql.ErrNoRows):
			return "", q.fail(err)
		}
	}
	return "", q.missed(ctx, q.db.st.exists, id, mid, now)
}

// Peek returns up to n visible messages in FIFO order without changing them.
func (q *driverQueue) Peek(ctx context.Context, n int) ([]*driver.Message, error) {
	return q.peekRows(q.db.st.peek.QueryContext(ctx, q.qid, q.now(), n))
}

var _ driver.PeekPager = (*driverQueue)(nil)

// PeekAfter returns up to n visible messages whose id is above after (""
// from the first), in id order, without changing them: one statement.
func (q *driverQueue) PeekAfter(ctx context.Context, after string, n int) ([]*driver.Message, error) {
	var from int64
	if after != "" {
		var err error
		if from, err = strconv.ParseInt(after, 10, 64); err != nil {
			return nil, fmt.Errorf("%w: after %q is not an id of this queue", driver.ErrInvalidArgument, after)
		}
	}
	return q.peekRows(q.db.st.peekAfter.QueryContext(ctx, q.qid, q.now(), n, from))
}

// peekRows reads the rows of sqlPeek or sqlPeekAfter.
func (q *driverQueue) peekRows(rows *sql.Rows, err error) ([]*driver.Message, error) {
	if err != nil {
		return nil, q.fail(err)
	}
	defer rows.Close()
	var msgs []*driver.Message
	for rows.Next() {
		var id, dc, ins, exp, vis int64
		var body, meta []byte
		if err := rows.Scan(&id, &body, &meta, &dc, &ins, &exp, &vis); err != nil {
			return nil, q.fail(err)
		}
		md, err := driver.DecodeMetadata(meta)
		if err != nil {
			return nil, q.fail(err)
		}
		msgs = append(msgs, &driver.Message{
			Metadata:      md,
			ID:            strconv.FormatInt(id, 10),
			Body:          body,
			DequeueCount:  int(dc),
			InsertedAt:    fromNanos(ins),
			ExpiresAt:     fromExpiry(exp),
			NextVisibleAt: fromNanos(vis),
		})
	}
	if err := rows.Err(); err != nil {
		return nil, q.fail(err)
	}
	return msgs, nil
}

// Count returns the number of unexpired messages, visible or not.
func (q *driverQueue) Count(ctx context.Context) (int, error) {
	var n int
	if err := q.db.st.count.QueryRowContext(ctx, q.qid, q.now()).Scan(&n); err != nil {
		return 0, q.fail(err)
	}
	return n, nil
}

// Clear deletes every message of the queue. Ids are not reused afterwards.
func (q *driverQueue) Clear(ctx context.Context) error {
	if err := q.clear(ctx); err != nil {
		return q.fail(err)
	}
	return nil
}

func (q *driverQueue) clear(ctx context.Context) error {
	tx, err := q.db.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	for _, st := range []*sql.Stmt{q.db.st.clearBodies, q.db.st.clear, q.db.st.clearDepth} {
		if _, err := tx.StmtContext(ctx, st).ExecContext(ctx, q.qid); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// DeleteBatch deletes the messages named by receipts in one transaction and
// returns one result per receipt, in order: nil (deleted),
// queue.ErrReceiptMismatch or queue.ErrNotFound, as Delete would. err
// reports a failure of the whole call, in which case nothing was deleted.
func (q *driverQueue) DeleteBatch(ctx context.Context, receipts []driver.Receipt) ([]error, error) {
	if len(receipts) == 0 {
		return nil, nil
	}
	tx, err := q.db.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, q.fail(err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	now := q.now()
	results := make([]error, len(receipts))
	for start := 0; start < len(receipts); start += queue.MaxBatchSize {
		end := min(start+queue.MaxBatchSize, len(receipts))
		if err := q.deleteChunk(ctx, tx, now, receipts[start:end], results[start:end]); err != nil {
			return nil, q.fail(err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, q.fail(err)
	}
	q.db.committed()
	return results, nil
}

// deleteChunk deletes up to queue.MaxBatchSize receipts inside tx and fills
// results. An error is a failure of the database.
func (q *driverQueue) deleteChunk(ctx context.Context, tx *sql.Tx, now int64, rs []driver.Receipt, results []error) error {
	var (
		ids   [queue.MaxBatchSize]int64
		args  = make([]any, 1, 1+2*queue.MaxBatchSize)
		state [queue.MaxBatchSize]uint8 // 0 pending, 1 deleted, 2 not found, 3 to classify
	)
	args[0] = q.qid
	for i, r := range rs {
		id, ok := parseID(r.ID)
		if !ok {
			state[i] = 2
			continue
		}
		ids[i] = id
		rc, ok := parseReceipt(r.PopReceipt)
		if !ok {
			state[i] = 3
			continue
		}
		for j := range i {
			if ids[j] == id && state[j] != 2 {
				// The same id twice: take the receipts one by one, as
				// repeated Deletes would, inside this transaction.
				return q.deleteEach(ctx, tx, now, rs, results)
			}
		}
		args = append(args, id, rc)
	}
	if k := (len(args) - 1) / 2; k > 0 {
		st, size := q.db.deleteBatchStmt(k)
		for range size - k {
			args = append(args, nil, nil) // NULL ids match nothing
		}
		var qargs []any
		if oneReceipt(args[1 : 1+2*k]) {
			st = q.db.st.delBatchOne[bits.Len(uint(k-1))]
			qargs = make([]any, 0, 2+size)
			qargs = append(qargs, q.qid, args[2])
			for i := range size {
				qargs = append(qargs, args[1+2*i])
			}
		} else {
			qargs = deleteBatchArgs(q.qid, args[1:])
		}
		rows, err := tx.StmtContext(ctx, st).QueryContext(ctx, qargs...)
		if err != nil {
			return err
		}
		gone := make([]int64, 0, k)
		var cols [2]any
		var v [2]int64
		for rows.Next() {
			if err := rows.Scan(&cols[0], &cols[1]); err != nil {
				rows.Close()
				return err
			}
			if err := ints(cols[:], v[:]); err != nil {
				rows.Close()
				return err
			}
			id, exp := v[0], v[1]
			gone = append(gone, id)
			for i := range rs { // ids pending (state 0) are distinct
				if state[i] == 0 && ids[i] == id {
					state[i] = 1
					if exp <= now {
						state[i] = 2 // expired: gone, and now deleted too
					}
					break
				}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if err := q.gone(ctx, tx, gone); err != nil {
			return err
		}
		for i := range rs {
			if state[i] == 0 {
				state[i] = 3 // not deleted: a stale receipt or a missing message
			}
		}
	}
	// Tell stale receipts from missing messages.
	var exists map[int64]bool
	for i := range rs {
		if state[i] == 3 {
			if exists == nil {
				var err error
				if exists, err = q.existing(ctx, tx, now, ids[:len(rs)], state[:len(rs)]); err != nil {
					return err
				}
			}
			if !exists[ids[i]] {
				state[i] = 2
			}
		}
	}
	for i, r := range rs {
		switch state[i] {
		case 1:
			results[i] = nil
		case 2:
			results[i] = notFound(r.ID)
		default:
			results[i] = fmt.Errorf("%w: message %s has a newer pop receipt", driver.ErrReceiptMismatch, r.ID)
		}
	}
	return nil
}

// existing returns which of the ids whose state is 3 are present and
// unexpired.
func (q *driverQueue) existing(ctx context.Context, tx *sql.Tx, now int64, ids []int64, state []uint8) (map[int64]bool, error) {
	args := make([]any, 2+queue.MaxBatchSize)
	args[0], args[1] = q.qid, now
	k := 2
	for i, id := range ids {
		if state[i] == 3 {
			args[k] = id
			k++
		}
	}
	rows, err := tx.StmtContext(ctx, q.db.st.existsBatch).QueryContext(ctx, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		found[id] = true
	}
	return found, rows.Err()
}

// deleteEach deletes receipts one at a time inside tx, for a batch that
// names an id more than once.
func (q *driverQueue) deleteEach(ctx context.Context, tx *sql.Tx, now int64, rs []driver.Receipt, results []error) error {
	del, exists := tx.StmtContext(ctx, q.db.st.del), tx.StmtContext(ctx, q.db.st.exists)
	var gone []int64
	for i, r := range rs {
		mid, ok := parseID(r.ID)
		if !ok {
			results[i] = notFound(r.ID)
			continue
		}
		if rc, ok := parseReceipt(r.PopReceipt); ok {
			var exp int64
			err := del.QueryRowContext(ctx, q.qid, mid, rc).Scan(&exp)
			if err == nil {
				gone = append(gone, mid)
			}
			switch {
			case err == nil && exp > now:
				results[i] = nil
				continue
			case err == nil:
				results[i] = notFound(r.ID)
				continue
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
		}
		var exp int64
		switch err := exists.QueryRowContext(ctx, q.qid, mid).Scan(&exp); {
		case err == nil && exp > now:
			results[i] = fmt.Errorf("%w: message %s has a newer pop receipt", driver.ErrReceiptMismatch, r.ID)
		case err == nil, errors.Is(err, sql.ErrNoRows):
			results[i] = notFound(r.ID)
		default:
			return err
		}
	}
	return q.gone(ctx, tx, gone)
}

// oneReceipt tells whether the pairs (id, receipt …) share one receipt.
func oneReceipt(pairs []any) bool {
	for i := 3; i < len(pairs); i += 2 {
		if pairs[i] != pairs[1] {
			return false
		}
	}
	return true
}

// deleteBatchClasses is the number of prepared sqlDeleteBatch sizes: 1, 2,
// 4 … queue.MaxBatchSize.
const deleteBatchClasses = 6

// deleteBatchStmt returns the prepared sqlDeleteBatch for k pairs, rounded
// up to a power of two, and that size.
func (db *DB) deleteBatchStmt(k int) (*sql.Stmt, int) {
	c := bits.Len(uint(k - 1)) // ceil(log2(k))
	return db.st.delBatch[c], 1 << c
}

// parseID parses a message id: the canonical decimal text of a positive
// integer.
func parseID(s string) (int64, bool) {
	if s == "" || s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// formatReceipt shows a receipt as 16 lowercase hex digits.
func formatReceipt(r int64) string {
	const hex = "0123456789abcdef"
	var b [16]byte
	u := uint64(r)
	for i := 15; i >= 0; i-- {
		b[i] = hex[u&15]
		u >>= 4
	}
	return string(b[:])
}

// parseReceipt is the inverse of formatReceipt.
func parseReceipt(s string) (int64, bool) {
	if len(s) != 16 {
		return 0, false
	}
	u, err := strconv.ParseUint(s, 16, 64)
	return int64(u), err == nil
}

// satAdd returns now+d, saturating at the no-expiry value.
func satAdd(now int64, d time.Duration) int64 {
	if t := now + int64(d); t >= now {
		return t
	}
	return noExpiry
}

func fromNanos(ns int64) time.Time { return time.Unix(0, ns).UTC() }

func fromExpiry(ns int64) time.Time {
	if ns == noExpiry {
		return time.Time{}
	}
	return fromNanos(ns)
}
