package postgres

import (
	"context"
	sqldriver "database/sql/driver"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// pgQueue is the driver of one queue of a DB.
type pgQueue struct {
	db *DB
	st *queueState

	// onClose, if set, runs on Close (a queue opened by URL releases its
	// share of the DB); sharedKey names that DB for siblings.
	onClose   func() error
	sharedKey string
}

func (q *pgQueue) Name() string { return q.st.name }

func (q *pgQueue) Features() driver.Features {
	return driver.Features{
		Name:           "postgres",
		MaxBatch:       queue.MaxBatchSize,
		MaxPeek:        queue.MaxPeek,
		MaxBody:        q.db.maxBody,
		ExactCount:     false,
		BatchDelete:    true,
		Siblings:       true,
		NativeNotify:   true,
		Metadata:       driver.DefaultMetadataLimits,
		Durability:     driver.PowerLoss,
		TimeResolution: time.Microsecond,
		BusyTasks:      BusyTasks,
	}
}

func (q *pgQueue) Classify(err error) (bool, time.Duration) { return classify(err) }

// As gives the DB behind the queue to a *(*DB) target.
func (q *pgQueue) As(target any) bool {
	if p, ok := target.(**DB); ok {
		*p = q.db
		return true
	}
	return false
}

// Close releases the queue's share of a DB opened by URL; a queue taken
// from a DB the program opened leaves it open.
func (q *pgQueue) Close() error {
	if q.onClose != nil {
		f := q.onClose
		q.onClose = nil
		return f()
	}
	return nil
}

// check refuses calls on a closed DB.
func (q *pgQueue) check() error {
	if q.db.closed.Load() {
		return queue.ErrClosed
	}
	return nil
}

func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }

// Put stores the message, its body and its count in one statement; when
// the queue's notify interval allows, the same statement notifies.
func (q *pgQueue) Put(ctx context.Context, body []byte, opts driver.PutOptions) (_ string, rerr error) {
	defer func() { rerr = ended(ctx, rerr) }()
	if err := q.check(); err != nil {
		return "", err
	}
	r := row(body, opts)
	lim := &q.st.n
	notify := lim.claim(wallNow(), q.db.notify)
	var id int64
	c, err := q.db.pool.Acquire(ctx)
	if err == nil {
		if notify {
			err = c.QueryRow(ctx, q.db.sql.putNotify, q.db.nowArg(), q.st.id, r.delay, r.ttl, r.body, r.meta, q.db.channel, q.st.name).Scan(&id)
		} else {
			err = c.QueryRow(ctx, q.db.sql.put, q.db.nowArg(), q.st.id, r.delay, r.ttl, r.body, r.meta).Scan(&id)
		}
		c.Release()
		err = unanswered(ctx, err)
	}
	if err != nil {
		if notify {
			lim.unclaim()
		}
		return "", err
	}
	if !notify {
		q.db.trailingNotify(q.st)
	}
	return strconv.FormatInt(id, 10), nil
}

// putRow is what a put writes for one message, as the statements take
// it: what Put and PutBatch share.
type putRow struct {
	delay, ttl int64 // µs; ttl -1: no expiry
	body       []byte
	meta       []byte // driver.EncodeMetadata's JSON; nil: NULL
}

func row(body []byte, opts driver.PutOptions) putRow {
	ttl := int64(-1)
	if opts.TTL != driver.NoExpiry {
		ttl = micros(opts.TTL)
	}
	if body == nil {
		body = []byte{}
	}
	return putRow{delay: micros(opts.InitialVisibilityDelay), ttl: ttl, body: body, meta: driver.EncodeMetadata(opts.Metadata)}
}

var _ driver.PutBatcher = (*pgQueue)(nil)

// PutBatch stores the messages in one statement (one transaction: all or
// none) and notifies once for the batch, as Put does for one message,
// when the queue's notify interval allows (else a trailing notification
// follows).
func (q *pgQueue) PutBatch(ctx context.Context, reqs []driver.PutRequest) (_ []string, _ []error, rerr error) {
	defer func() { rerr = ended(ctx, rerr) }()
	if err := q.check(); err != nil {
		return nil, nil, err
	}
	delays, ttls, bodies := make([]int64, len(reqs)), make([]int64, len(reqs)), make([][]byte, len(reqs))
	metas := make([]*string, len(reqs)) // text[] cast to jsonb; nil: NULL
	for i, req := range reqs {
		r := row(req.Body, req.Opts)
		delays[i], ttls[i], bodies[i] = r.delay, r.ttl, r.body
		if r.meta != nil {
			m := string(r.meta)
			metas[i] = &m
		}
	}
	lim := &q.st.n
	notify := lim.claim(wallNow(), q.db.notify)
	var ids []string
	c, err := q.db.pool.Acquire(ctx)
	if err == nil {
		var rows pgx.Rows
		if notify {
			rows, err = c.Query(ctx, q.db.sql.putBatchNotify, q.db.nowArg(), q.st.id, delays, ttls, bodies, metas, q.db.channel, q.st.name)
		} else {
			rows, err = c.Query(ctx, q.db.sql.putBatch, q.db.nowArg(), q.st.id, delays, ttls, bodies, metas)
		}
		if err == nil {
			ids = make([]string, 0, len(reqs))
			var id int64
			_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
				ids = append(ids, strconv.FormatInt(id, 10))
				return nil
			})
		}
		c.Release()
		err = unanswered(ctx, err)
	}
	if err == nil && len(ids) != len(reqs) {
		err = fmt.Errorf("the batch put returned %d ids for %d messages", len(ids), len(reqs))
	}
	if err != nil {
		if notify {
			lim.unclaim()
		}
		return nil, nil, err
	}
	if !notify {
		q.db.trailingNotify(q.st)
	}
	return ids, make([]error, len(reqs)), nil
}

// Get hides and returns up to n visible messages in one statement.
func (q *pgQueue) Get(ctx context.Context, n int, visibility time.Duration) (_ []*driver.Message, rerr error) {
	defer func() { rerr = ended(ctx, rerr) }()
	if err := q.check(); err != nil {
		return nil, err
	}
	q.kickSweep()
	rows, err := q.db.pool.Query(ctx, q.db.sql.get, q.db.nowArg(), q.st.id, n, micros(visibility))
	if err != nil {
		return nil, err
	}
	ms := make([]driver.Message, 0, n)
	// The scan's targets live for the call, not per row: a pointer to a
	// per-row variable passed to Scan escapes, one allocation each.
	var (
		id, receipt int64
		m           driver.Message
		expires     pgtype.Timestamptz
		meta        []byte // nil for NULL, so a row without metadata allocates nothing for it
		dest        []any
	)
	fds := rows.FieldDescriptions()
	raw := rawGetRows(fds)
	if !raw {
		dest = []any{&id, &receipt, &m.DequeueCount, &m.InsertedAt, &expires, &m.NextVisibleAt, &m.Body, &meta}
	}
	for rows.Next() {
		m = driver.Message{}
		if raw {
			// The row's bytes, read in place of Scan's dispatch per
			// column (a tenth of the client's instructions per message).
			id, receipt, meta, err = decodeGetRow(rows.RawValues(), fds, &m)
		} else {
			expires = pgtype.Timestamptz{}
			if err = rows.Scan(dest...); err == nil && expires.Valid {
				m.ExpiresAt = expires.Time
			}
		}
		if err != nil {
			rows.Close()
			return nil, err
		}
		if meta != nil {
			if m.Metadata, err = driver.DecodeMetadata(meta); err != nil {
				rows.Close()
				return nil, err
			}
		}
		m.ID, m.PopReceipt = formatIDReceipt(id, receipt)
		ms = append(ms, m)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return nil, nil
	}
	out := make([]*driver.Message, len(ms))
	for i := range ms {
		out[i] = &ms[i]
	}
	q.db.churned(len(ms))
	return out, nil
}

// kickSweep starts a sweep of the queue's expired messages in the
// background (see Sweep), unless one is running or began within the DB's
// sweep interval. Every call that reads the queue (Get, Peek, Count,
// Depth) kicks it, so expired messages leave the count, the storage and a
// Get's path soon after they expire while anyone uses the queue, live work
// or not; the caller never waits for it.
//
// A DB sweeps one queue at a time (so sweeps hold at most one connection
// of the pool, whatever the number of queues with a backlog to sweep): a
// call that finds another queue's sweep running leaves its own to a later
// call.
func (q *pgQueue) kickSweep() {
	st, db := q.st, q.db
	now := wallNow()
	st.sweepMu.Lock()
	defer st.sweepMu.Unlock()
	if st.sweeping || (!st.lastSweep.IsZero() && now.Sub(st.lastSweep) < db.sweepEvery) {
		return
	}
	select {
	case db.sweepSlot <- struct{}{}:
	default:
		return // another queue's sweep runs
	}
	done := func() {
		<-db.sweepSlot
		st.sweepMu.Lock()
		st.sweeping = false
		st.sweepMu.Unlock()
	}
	if !db.background(func(ctx context.Context) { _, _ = q.sweep(ctx, sweepBatch, sweepTurn) }, done) {
		<-db.sweepSlot
		return
	}
	st.sweeping, st.lastSweep = true, now
}

// Sweep deletes the queue's expired messages, states, bodies and count, in
// statements of up to sweepBatch messages each (one short transaction
// apiece), and returns how many it deleted. It finds them through the
// bodies_expiry index, so its work is proportional to what has expired,
// not to the queue's depth. Messages another statement holds are left to
// the next sweep.
func (q *pgQueue) Sweep(ctx context.Context) (int, error) {
	return q.sweep(ctx, sweepBatch, 0)
}

// sweep runs sweep statements of up to batch messages each until one finds
// less than a batch to do, or, when turn > 0, until it has run turn of them.
func (q *pgQueue) sweep(ctx context.Context, batch, turn int) (int, error) {
	total := 0
	for i := 1; ; i++ {
		var found, deleted, filed int
		err := q.db.pool.QueryRow(ctx, q.db.sql.sweep, q.db.nowArg(), q.st.id, batch).Scan(&found, &deleted, &filed)
		if err != nil {
			return total, err
		}
		total += deleted
		q.db.churned(2*deleted + filed)
		if (found < batch || deleted == 0) && filed == 0 || i == turn {
			return total, nil
		}
	}
}

// formatReceipt writes a receipt as 16 hex digits.
func formatReceipt(r int64) string {
	var b [16]byte
	appendReceipt(b[:0], r)
	return string(b[:])
}

// formatIDReceipt formats a message's id and receipt as one string, split
// in two: one allocation a message where two were (ID and receipt go
// together; either kept alone holds at most 36 bytes).
func formatIDReceipt(id, r int64) (string, string) {
	var buf [36]byte
	b := strconv.AppendInt(buf[:0], id, 10)
	n := len(b)
	s := string(appendReceipt(b, r))
	return s[:n], s[n:]
}

// appendReceipt appends receipt r's 16 hex digits to b.
func appendReceipt(b []byte, r int64) []byte {
	const digits = "0123456789abcdef"
	b = append(b, "0000000000000000"...)
	h := b[len(b)-16:]
	u := uint64(r)
	for i := len(h) - 1; i >= 0; i-- {
		h[i] = digits[u&15]
		u >>= 4
	}
	return b
}

// parseReceipt reads a receipt (16 hex digits, either case, as
// strconv.ParseUint read them; a tenth of its instructions); ok is false
// for one this driver never made.
func parseReceipt(s string) (int64, bool) {
	if len(s) != 16 {
		return 0, false
	}
	var u uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		u = u<<4 | uint64(c)
	}
	return int64(u), true
}

// parseID reads a message's id; for a string that is none it returns 0
// (no message has it) and false. ParseInt's answer to an overflow is the
// largest int64, an id a message may hold: it is never passed on.
func parseID(s string) (int64, bool) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, false
	}
	return id, true
}

// outcome turns what a delete or update found into the contract's error:
// the message was gone or expired (ErrNotFound), or held with another
// receipt (ErrReceiptMismatch).
func outcome(id string, live *bool) error {
	if live == nil || !*live {
		return fmt.Errorf("%w: id %s", queue.ErrNotFound, id)
	}
	return fmt.Errorf("%w: id %s", queue.ErrReceiptMismatch, id)
}

// Delete removes a message held with its newest receipt.
func (q *pgQueue) Delete(ctx context.Context, id, popReceipt string) (rerr error) {
	defer func() { rerr = ended(ctx, rerr) }()
	if err := q.check(); err != nil {
		return err
	}
	n, ok := parseID(id)
	if !ok {
		return fmt.Errorf("%w: id %q", queue.ErrNotFound, id)
	}
	var receipt any // NULL: matches no message
	if r, ok := parseReceipt(popReceipt); ok {
		receipt = r
	}
	var deleted, live *bool
	if err := q.db.pool.QueryRow(ctx, q.db.sql.del, q.db.nowArg(), q.st.id, n, receipt).Scan(&deleted, &live); err != nil {
		return err
	}
	if deleted != nil {
		q.db.churned(2)
		if !*deleted {
			return fmt.Errorf("%w: id %s expired", queue.ErrNotFound, id)
		}
		return nil
	}
	return outcome(id, live)
}

// DeleteBatch deletes up to 32 messages in one statement, which it may
// share with concurrent DeleteBatch calls of the queue (deleteGroup).
func (q *pgQueue) DeleteBatch(ctx context.Context, receipts []driver.Receipt) ([]error, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	res, err := q.st.dels.do(ctx, receipts, q.deleteBatch)
	return res, ended(ctx, err)
}

// noReceipt stands in the delete's array for a receipt this driver never
// made (one that does not parse): no message holds it, as Get's {receipt}
// draws from ±0.9e19 and math.MinInt64 lies outside (and a message never
// got holds NULL).
const noReceipt = math.MinInt64

// deleteBatch deletes any number of messages in one statement. A receipt
// repeated in the list is sent once: the repeat finds its message gone.
// The arrays go as int8Array (no allocation per element), and the statement answers each receipt in order, so the common batch (every
// id distinct) is matched to its outcomes without a map.
func (q *pgQueue) deleteBatch(ctx context.Context, receipts []driver.Receipt) ([]error, error) {
	ids := make([]int64, len(receipts))
	rs := make([]int64, len(receipts))
	for i, r := range receipts {
		ids[i], _ = parseID(r.ID) // 0 if not an id: no message has it
		if v, ok := parseReceipt(r.PopReceipt); ok {
			rs[i] = v
		} else {
			rs[i] = noReceipt
		}
	}
	if !distinct(ids) {
		return q.deleteRepeats(ctx, receipts, ids, rs)
	}
	res := make([]error, len(receipts))
	err := q.deleteRows(ctx, ids, rs, func(i int, deleted, live pgtype.Bool) {
		res[i] = q.deleteOutcome(receipts[i].ID, deleted, live)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// distinct reports whether no id is repeated; it sorts a copy, so a batch
// of any size is checked without a map.
func distinct(ids []int64) bool {
	if len(ids) < 2 {
		return true
	}
	s := slices.Clone(ids)
	slices.Sort(s)
	for i := 1; i < len(s); i++ {
		if s[i] == s[i-1] {
			return false
		}
	}
	return true
}

// int8Array is a bigint[] argument that pgx encodes without an allocation
// per element: its elements are pointers into the slice (int8Elem), which
// go into an interface as they are, where a []int64's int64s were each
// boxed (an allocation for every value above 255).
type int8Array []int64

func (a int8Array) Dimensions() []pgtype.ArrayDimension {
	return []pgtype.ArrayDimension{{Length: int32(len(a)), LowerBound: 1}}
}

func (a int8Array) Index(i int) any { return int8Elem{&a[i]} }

func (a int8Array) IndexType() any { return int8Elem{} }

// Value is the array's text, for a pool whose statements go without their
// parameters' types (QueryExecModeExec, the simple protocol): pgx then
// finds no codec for int8Array and sends this, which the statement's
// ::bigint[] reads.
func (a int8Array) Value() (sqldriver.Value, error) {
	b := make([]byte, 0, 2+21*len(a))
	b = append(b, '{')
	for i, v := range a {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, v, 10)
	}
	return string(append(b, '}')), nil
}

// int8Elem is one element of an int8Array.
type int8Elem struct{ p *int64 }

func (e int8Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: *e.p, Valid: true}, nil
}

// deleteRows runs the batch delete over the arrays and calls f with each
// receipt's position and its row: deleted is set if it deleted its message
// (true: unexpired), live if it did not and its message was there before
// the statement (true: unexpired).
func (q *pgQueue) deleteRows(ctx context.Context, ids, rs []int64, f func(i int, deleted, live pgtype.Bool)) error {
	rows, err := q.db.pool.Query(ctx, q.db.sql.delBatch, q.db.nowArg(), q.st.id, int8Array(ids), int8Array(rs))
	if err != nil {
		return err
	}
	i := 0
	var deleted, live pgtype.Bool // for the call: a per-row target escapes
	dest := []any{&deleted, &live}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return err
		}
		if i >= len(ids) {
			rows.Close()
			return fmt.Errorf("delete batch: more rows than %d receipts", len(ids))
		}
		f(i, deleted, live)
		i++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if i != len(ids) {
		return fmt.Errorf("delete batch: %d rows for %d receipts", i, len(ids))
	}
	return nil
}

// deleteOutcome is a receipt's error from its row (see deleteRows).
func (q *pgQueue) deleteOutcome(id string, deleted, live pgtype.Bool) error {
	if deleted.Valid {
		q.db.churned(2)
		if !deleted.Bool {
			return fmt.Errorf("%w: id %s expired", queue.ErrNotFound, id)
		}
		return nil
	}
	if !live.Valid {
		return outcome(id, nil)
	}
	return outcome(id, &live.Bool)
}

// deleteRepeats is deleteBatch for a list that names an id more than once
// (or more than one string that is no id): each receipt is sent once, and
// a receipt whose message an earlier one in the list deleted fails as
// deleted earlier in the batch.
func (q *pgQueue) deleteRepeats(ctx context.Context, receipts []driver.Receipt, allIDs, allRs []int64) ([]error, error) {
	ids := make([]int64, 0, len(receipts))
	rs := make([]int64, 0, len(receipts))
	sent := make([]int, len(receipts)) // position in the arrays, 1-based; 0: a repeat
	first := make(map[driver.Receipt]bool, len(receipts))
	for i, r := range receipts {
		if first[r] {
			continue
		}
		first[r] = true
		ids = append(ids, allIDs[i])
		rs = append(rs, allRs[i])
		sent[i] = len(ids)
	}
	type result struct{ deleted, live pgtype.Bool }
	got := make([]result, len(ids)+1)
	if err := q.deleteRows(ctx, ids, rs, func(i int, deleted, live pgtype.Bool) { got[i+1] = result{deleted, live} }); err != nil {
		return nil, err
	}
	res := make([]error, len(receipts))
	deleted := make(map[string]bool, len(receipts))
	for i, r := range receipts {
		k := sent[i]
		switch {
		case k == 0 || deleted[r.ID]:
			// Named earlier in the batch, and deleted then.
			res[i] = fmt.Errorf("%w: id %s (deleted earlier in the batch)", queue.ErrNotFound, r.ID)
		case got[k].deleted.Valid:
			deleted[r.ID] = true
			res[i] = q.deleteOutcome(r.ID, got[k].deleted, pgtype.Bool{})
		default:
			res[i] = q.deleteOutcome(r.ID, pgtype.Bool{}, got[k].live)
		}
	}
	return res, nil
}

// UpdateVisibility hides a held message for d from now and returns its new
// receipt.
func (q *pgQueue) UpdateVisibility(ctx context.Context, id, popReceipt string, d time.Duration) (_ string, rerr error) {
	defer func() { rerr = ended(ctx, rerr) }()
	if err := q.check(); err != nil {
		return "", err
	}
	n, ok := parseID(id)
	if !ok {
		return "", fmt.Errorf("%w: id %q", queue.ErrNotFound, id)
	}
	var receipt any
	if r, ok := parseReceipt(popReceipt); ok {
		receipt = r
	}
	var (
		newReceipt *int64
		live       *bool
	)
	if err := q.db.pool.QueryRow(ctx, q.db.sql.update, q.db.nowArg(), q.st.id, n, receipt, micros(d)).Scan(&newReceipt, &live); err != nil {
		return "", err
	}
	if newReceipt != nil {
		q.db.churned(1)
		if d == 0 {
			q.db.trailingNotify(q.st) // released: visible to a sleeping consumer
		}
		return formatReceipt(*newReceipt), nil
	}
	return "", outcome(id, live)
}

// Peek returns up to n visible messages, oldest first, changing nothing.
func (q *pgQueue) Peek(ctx context.Context, n int) (_ []*driver.Message, rerr error) {
	defer func() { rerr = ended(ctx, rerr) }()
	if err := q.check(); err != nil {
		return nil, err
	}
	q.kickSweep()
	rows, err := q.db.pool.Query(ctx, q.db.sql.peek, q.db.nowArg(), q.st.id, n)
	return q.peekRows(rows, err)
}

var _ driver.PeekPager = (*pgQueue)(nil)

// PeekAfter returns up to n visible messages whose id is above after (""
// from the first), in id order, without changing them: one statement.
func (q *pgQueue) PeekAfter(ctx context.Context, after string, n int) (_ []*driver.Message, rerr error) {
	defer func() { rerr = ended(ctx, rerr) }()
	if err := q.check(); err != nil {
		return nil, err
	}
	var from int64
	if after != "" {
		var err error
		if from, err = strconv.ParseInt(after, 10, 64); err != nil {
			return nil, fmt.Errorf("%w: after %q is not an id of this queue", driver.ErrInvalidArgument, after)
		}
	}
	q.kickSweep()
	// In a transaction of its own, for peekAfterPlanner's settings
	// (SET LOCAL): read-only, it changes nothing.
	var out []*driver.Message
	err := pgx.BeginTxFunc(ctx, q.db.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, peekAfterPlanner); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, q.db.sql.peekAfter, q.db.nowArg(), q.st.id, n, from)
		out, err = q.peekRows(rows, err)
		return err
	})
	return out, err
}

// peekRows reads the rows of a peek or a PeekAfter.
func (q *pgQueue) peekRows(rows pgx.Rows, err error) ([]*driver.Message, error) {
	if err != nil {
		return nil, err
	}
	var out []*driver.Message
	var meta []byte // one for the call, as in Get
	for rows.Next() {
		var (
			id      int64
			m       driver.Message
			expires *time.Time
		)
		if err := rows.Scan(&id, &m.DequeueCount, &m.InsertedAt, &expires, &m.NextVisibleAt, &m.Body, &meta); err != nil {
			rows.Close()
			return nil, err
		}
		if meta != nil {
			if m.Metadata, err = driver.DecodeMetadata(meta); err != nil {
				rows.Close()
				return nil, err
			}
		}
		m.ID = strconv.FormatInt(id, 10)
		if expires != nil {
			m.ExpiresAt = *expires
		}
		out = append(out, &m)
	}
	return out, rows.Err()
}

// Count is the number of messages, visible or not, read from the queue's
// counter rows: approximate, as expired messages count until swept (which
// Count kicks).
func (q *pgQueue) Count(ctx context.Context) (int, error) {
	if err := q.check(); err != nil {
		return 0, err
	}
	q.kickSweep()
	var n int64
	err := q.db.pool.QueryRow(ctx, q.db.sql.count, q.st.id).Scan(&n)
	return int(n), ended(ctx, err)
}

// Clear deletes every message of the queue in one statement.
func (q *pgQueue) Clear(ctx context.Context) error {
	if err := q.check(); err != nil {
		return err
	}
	var n int64
	err := q.db.pool.QueryRow(ctx, q.db.sql.clear, q.st.id).Scan(&n)
	q.db.churned(2 * int(n))
	return ended(ctx, err)
}

// Sibling opens another queue of the same DB.
func (q *pgQueue) Sibling(ctx context.Context, name string) (driver.Queue, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	if q.sharedKey == "" {
		return q.db.queue(ctx, name)
	}
	db, err := acquire(ctx, q.sharedKey, nil)
	if err != nil {
		return nil, err
	}
	s, err := db.queue(ctx, name)
	if err != nil {
		_ = release(q.sharedKey)
		return nil, err
	}
	key := q.sharedKey
	s.onClose = func() error { return release(key) }
	s.sharedKey = key
	return s, nil
}

// Subscribe returns a channel that receives soon after a Put to the queue
// by any process, served by the DB's one LISTEN connection.
func (q *pgQueue) Subscribe(ctx context.Context) (<-chan struct{}, error) {
	if err := q.check(); err != nil {
		return nil, err
	}
	return q.db.hub.subscribe(ctx, q.st.name), nil
}
