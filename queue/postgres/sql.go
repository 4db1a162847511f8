package postgres

import (
	"strconv"
	"strings"
)

// statements are the driver's SQL, with the schema filled in. pgx prepares
// each once per connection and caches it (its default exec mode), so none
// is parsed or planned twice.
//
// Every statement that computes a time reads {now}: $1 if the DB has a
// clock of its own (tests), else the server's now(). Times are timestamptz
// (microseconds); a message put with queue.NoExpiry expires at 'infinity'.
// Durations are passed in microseconds.
type statements struct {
	register, lookup         string
	put, putNotify, notify   string
	putBatch, putBatchNotify string
	putTx, putTxNotify       string
	delTx                    string // del in a caller's transaction, its counter row chosen with txShard
	awaitCommit              string
	committedIDs             string
	get, peek, peekAfter     string
	del, delBatch, update    string
	count, clear, sweep      string
}

// putTxBase is put with the queue's id checked against its name ($8)
// and the database's name ($9, current_database()), and its counter row
// chosen with txShard.
func putTxBase(put string) string {
	put = strings.Replace(put, "VALUES ($2,", "VALUES ((SELECT id FROM {s}.queues WHERE id = $2 AND name = $8 AND current_database() = $9::text),", 1)
	return strings.Replace(put, "WHERE queue_id = $2 AND shard = {shard}", "WHERE queue_id = $2 AND shard = "+txShard, 1)
}

// txShard picks the counter row a statement in a caller's transaction
// updates: one of the rows kept for callers' transactions (countShards
// to 2×countShards−1, which no plain statement touches), the first from
// the connection's own that no other transaction holds, else the
// connection's own. A caller's transaction holds the row until it ends:
// on the plain statements' rows it would stall the Puts and deletes of
// every backend that shares the row until it commits, and with the
// connection's row alone two transactions whose backends share a row
// would commit one after the other.
var txShard = `coalesce((SELECT shard FROM {s}.counts WHERE queue_id = $2 AND shard >= ` + strconv.Itoa(countShards) + `
	ORDER BY (shard - {shard}) % ` + strconv.Itoa(countShards) + ` LIMIT 1 FOR UPDATE SKIP LOCKED), ` + strconv.Itoa(countShards) + ` + {shard})`

// peekAfterPlanner is run in PeekAfter's transaction before its
// statement: with no sort (and no bitmap scan, which yields no order) the
// only plan left walks messages_pkey up from the cursor and stops at the
// page's end, joining each body by bodies_pkey. Without it a table the
// planner has no statistics for (never analyzed) was read from the
// cursor to its end and sorted, for each page.
const peekAfterPlanner = "SET LOCAL enable_sort = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_mergejoin = off; SET LOCAL enable_hashjoin = off"

// shard is the counter row a connection updates (see countShards).
var shard = "pg_backend_pid() % " + strconv.Itoa(countShards)

// newStatements writes the statements for schema. With asyncLeases
// (WithAsyncLeases), a Get and an UpdateVisibility set synchronous_commit
// off for their own transaction: {async} is then a CTE that does it, and
// {from_async} and {and_async} make the statement read it (an
// unreferenced CTE is never run); without, all three are empty.
func newStatements(schema string, asyncLeases bool) statements {
	async, fromAsync, andAsync := "", "", ""
	if asyncLeases {
		async = "async AS (SELECT set_config('synchronous_commit', 'off', true)), "
		fromAsync = " FROM async"
		andAsync = "async, "
	}
	r := strings.NewReplacer(
		"{s}", schema,
		"{now}", "coalesce($1::timestamptz, now())",
		"{shard}", shard,
		"{receipt}", "((random() - 0.5) * 1.8e19)::bigint",
		"{async}", async,
		"{from_async}", fromAsync,
		"{and_async}", andAsync,
	)
	f := func(s string) string { return r.Replace(s) }
	put := `
WITH m AS (
	INSERT INTO {s}.messages (queue_id, visible_at, expires_at, inserted_at)
	VALUES ($2, {now} + $3::bigint * interval '1 microsecond',
	        CASE WHEN $4::bigint < 0 THEN 'infinity'::timestamptz ELSE {now} + $4::bigint * interval '1 microsecond' END,
	        {now})
	RETURNING id, expires_at
), b AS (
	INSERT INTO {s}.bodies (id, body, queue_id, expires_at, meta) SELECT id, $5, $2, expires_at, $6::jsonb FROM m
), c AS (
	UPDATE {s}.counts SET n = n + 1 WHERE queue_id = $2 AND shard = {shard}
)`
	// A batch put is one statement for many messages, given as arrays
	// (delays, TTLs, bodies and metadata, in order: $3, $4, $5, $6): their ids are drawn
	// from the identity's sequence first, in order, so that each body
	// joins its row and the ids come back in the order of the batch; one
	// count update adds them all.
	putBatch := `
WITH r AS MATERIALIZED (
	SELECT nextval(pg_get_serial_sequence('{s}.messages', 'id')) AS id, u.delay, u.ttl, u.body, u.meta, u.ord
	FROM unnest($3::bigint[], $4::bigint[], $5::bytea[], $6::text[]) WITH ORDINALITY AS u(delay, ttl, body, meta, ord)
	ORDER BY u.ord
), m AS (
	INSERT INTO {s}.messages (id, queue_id, visible_at, expires_at, inserted_at) OVERRIDING SYSTEM VALUE
	SELECT r.id, $2, {now} + r.delay * interval '1 microsecond',
	       CASE WHEN r.ttl < 0 THEN 'infinity'::timestamptz ELSE {now} + r.ttl * interval '1 microsecond' END,
	       {now}
	FROM r
	RETURNING id, expires_at
), b AS (
	INSERT INTO {s}.bodies (id, body, queue_id, expires_at, meta) SELECT m.id, r.body, $2, m.expires_at, r.meta::jsonb FROM m JOIN r ON r.id = m.id
), c AS (
	UPDATE {s}.counts SET n = n + cardinality($3::bigint[]) WHERE queue_id = $2 AND shard = {shard}
)`
	st := statements{
		// A batch put notifies once (putBatchNotify), as a Put does.
		putBatch:       f(putBatch + `SELECT r.id FROM r ORDER BY r.ord`),
		putBatchNotify: f(putBatch + `, n AS (SELECT pg_notify($7, $8)) SELECT r.id FROM r, n ORDER BY r.ord`),
		register: f(`
WITH ins AS (
	INSERT INTO {s}.queues (name) VALUES ($1) ON CONFLICT (name) DO NOTHING RETURNING id
), q AS (
	SELECT id FROM ins UNION ALL SELECT id FROM {s}.queues WHERE name = $1
), c AS (
	-- Only the rows missing from the statement's snapshot: ON CONFLICT's
	-- check on a row there waits for a transaction that updated it (an
	-- application's open PutTx), so the open would wait for its commit.
	INSERT INTO {s}.counts (queue_id, shard)
	SELECT q1.id, g FROM (SELECT id FROM q LIMIT 1) q1, generate_series(0, $2::int - 1) g
	WHERE NOT EXISTS (SELECT 1 FROM {s}.counts k WHERE k.queue_id = q1.id AND k.shard = g)
	ON CONFLICT DO NOTHING
)
SELECT id FROM q LIMIT 1`),
		lookup: f(`SELECT id FROM {s}.queues WHERE name = $1`),

		// A Put is one statement: the message's state, its body and its
		// count, and (putNotify) the notification, which PostgreSQL sends
		// when the statement commits.
		put:       f(put + `SELECT id FROM m`),
		putNotify: f(put + `, n AS (SELECT pg_notify($7, $8)) SELECT m.id FROM m, n`),
		notify:    `SELECT pg_notify($1, $2)`,

		// putTx and putTxNotify are put and putNotify in a caller's
		// transaction (PutTx): PostgreSQL sends putTxNotify's notification
		// when, and only when, the transaction commits. The queue's id is
		// looked up with its name and the database's, so a transaction on
		// another database (whose queues table may lack this queue, give
		// its id to another, or hold one alike: a database set up as this
		// one) fails the statement (queue_id NOT NULL) and aborts the
		// transaction rather than put a stray message. putTx's $7 and $8
		// are unused (typed so that both take the same arguments).
		putTx:       f(putTxBase(put) + `, n AS (SELECT $7::text, $8::text) SELECT m.id FROM m, n`),
		putTxNotify: f(putTxBase(put) + `, n AS (SELECT pg_notify($7, $8)) SELECT m.id FROM m, n`),

		// awaitCommit waits for the transactions that put the messages
		// $1 (ids) to end, and returns the ids of those whose body is not
		// there (rolled back, or already consumed): its speculative
		// inserts into bodies wait, on the primary key, for every
		// transaction still inserting the same id. It runs in a
		// transaction that is always rolled back.
		awaitCommit: f(`INSERT INTO {s}.bodies (id, body) SELECT x, ''::bytea FROM unnest($1::bigint[]) x
	ON CONFLICT (id) DO NOTHING RETURNING id`),
		// committedIDs: those of the messages $1 whose put has committed
		// and that are still there, read without waiting.
		committedIDs: f(`SELECT id FROM {s}.bodies WHERE id = ANY ($1::bigint[])`),

		// A Get is one statement: lock up to $3 visible messages, oldest
		// first, skipping those another Get has locked; hide them, with a
		// new receipt and their dequeue count + 1. Only the narrow state
		// row is rewritten; bodies are read from their own table. The
		// update finds the locked rows by their ctid (picked holds them
		// locked, so no other statement can have moved them): a TID scan
		// per row joined on ctid, with no index descent, or over the
		// array, whatever the generic plan (the array keeps a seq scan
		// from ever looking cheaper). Its commit waits for the WAL flush
		// as every commit does, unless WithAsyncLeases (see there for the
		// risk).
		get: f(`
WITH {async}picked AS (
	SELECT ctid, id, visible_at FROM {s}.messages
	WHERE queue_id = $2 AND visible_at <= {now} AND expires_at > {now}
	ORDER BY visible_at, id
	LIMIT $3
	FOR UPDATE SKIP LOCKED
), got AS (
	UPDATE {s}.messages m
	SET visible_at = {now} + $4::bigint * interval '1 microsecond',
	    dequeue_count = m.dequeue_count + 1,
	    receipt = {receipt}
	FROM picked
	WHERE m.ctid = ANY (ARRAY(SELECT ctid FROM picked)) AND m.ctid = picked.ctid
	RETURNING m.id, m.receipt, m.dequeue_count, m.inserted_at, m.expires_at, m.visible_at, picked.visible_at AS was_visible_at
)
SELECT got.id, got.receipt, got.dequeue_count, got.inserted_at, nullif(got.expires_at, 'infinity'), got.visible_at, b.body, b.meta
FROM {and_async}got JOIN {s}.bodies b ON b.id = got.id
ORDER BY got.was_visible_at, got.id`),

		peek: f(`
SELECT m.id, m.dequeue_count, m.inserted_at, nullif(m.expires_at, 'infinity'), m.visible_at, b.body, b.meta
FROM {s}.messages m JOIN {s}.bodies b ON b.id = m.id
WHERE m.queue_id = $2 AND m.visible_at <= {now} AND m.expires_at > {now}
ORDER BY m.visible_at, m.id
LIMIT $3`),

		// PeekAfter: a page of the visible messages whose id is above $4,
		// in id order (the order they were put). It walks messages_pkey up
		// from the cursor and stops at the page's end. queue_id + 0 keeps
		// the planner off messages_ready, from which it reads every visible
		// message of the queue and sorts them for each page (a listing of N
		// messages cost N²/page); it chose that when its statistics
		// underrated the queue, as they do a poison queue filled since the
		// last ANALYZE. The walk steps over other queues' messages between
		// the cursor and the page's last message: a whole listing reads the
		// rows above its first message once, and a page of a queue whose
		// messages are sparse among others' may read many rows. An index
		// (queue_id, id) was tried and rejected: a WAL-logged index entry
		// per put and per delete, for an operator's listing. PeekAfter runs
		// it after peekAfterPlanner: with no statistics at all the planner
		// still chose to read and sort every message above the cursor.
		peekAfter: f(`
SELECT m.id, m.dequeue_count, m.inserted_at, nullif(m.expires_at, 'infinity'), m.visible_at, b.body, b.meta
FROM {s}.messages m JOIN {s}.bodies b ON b.id = m.id
WHERE m.queue_id + 0 = $2 AND m.id > $4 AND m.visible_at <= {now} AND m.expires_at > {now}
ORDER BY m.id
LIMIT $3`),

		// Delete: the first column is set if the message was deleted (false
		// if it had expired), the second says whether it existed, unexpired,
		// before the statement (a receipt mismatch).
		del: f(`
WITH d AS (
	DELETE FROM {s}.messages WHERE id = $3 AND queue_id = $2 AND receipt = $4
	RETURNING id, expires_at > {now} AS live
), b AS (
	DELETE FROM {s}.bodies WHERE id IN (SELECT id FROM d)
), c AS (
	UPDATE {s}.counts SET n = n - 1 WHERE queue_id = $2 AND shard = {shard} AND EXISTS (SELECT 1 FROM d)
)
SELECT (SELECT live FROM d), (SELECT expires_at > {now} FROM {s}.messages WHERE id = $3 AND queue_id = $2)`),

		// A batch delete is one statement over the receipts as two arrays
		// (an id that names no message is sent as 0, a receipt this driver
		// never made as noReceipt: neither matches a row). It returns one
		// row per receipt, in the order of the arrays: whether the message
		// was unexpired if it deleted one (NULL if not), and for a receipt
		// that deleted nothing, whether its message existed, unexpired,
		// before the statement (then the receipt was stale; NULL: the
		// message was gone). That lookup runs only for such receipts.
		delBatch: f(`
WITH r AS (
	SELECT * FROM unnest($3::bigint[], $4::bigint[]) WITH ORDINALITY AS r(id, receipt, ord)
), d AS (
	DELETE FROM {s}.messages m USING r
	WHERE m.id = r.id AND m.receipt = r.receipt AND m.queue_id = $2
	RETURNING r.ord, m.id, m.expires_at > {now} AS live
), b AS (
	DELETE FROM {s}.bodies WHERE id IN (SELECT id FROM d)
), c AS (
	UPDATE {s}.counts SET n = n - (SELECT count(*) FROM d)
	WHERE queue_id = $2 AND shard = {shard} AND EXISTS (SELECT 1 FROM d)
)
SELECT d.live, CASE WHEN d.ord IS NULL THEN
	(SELECT e.expires_at > {now} FROM {s}.messages e WHERE e.id = r.id AND e.queue_id = $2) END
FROM r LEFT JOIN d ON d.ord = r.ord
ORDER BY r.ord`),

		// UpdateVisibility, like Get, waits for the flush unless
		// WithAsyncLeases.
		update: f(`
WITH {async}u AS (
	UPDATE {s}.messages
	SET visible_at = {now} + $5::bigint * interval '1 microsecond', receipt = {receipt}
	WHERE id = $3 AND queue_id = $2 AND receipt = $4 AND expires_at > {now}
	RETURNING receipt
)
SELECT (SELECT receipt FROM u), (SELECT expires_at > {now} FROM {s}.messages WHERE id = $3 AND queue_id = $2){from_async}`),

		// Count sums the queue's counter rows: O(1) in the queue's depth.
		// It is approximate as Azure's is: expired messages count until
		// they are swept.
		count: f(`SELECT coalesce(sum(n), 0) FROM {s}.counts WHERE queue_id = $1`),

		clear: f(`
WITH d AS (
	DELETE FROM {s}.messages WHERE queue_id = $1 RETURNING id
), b AS (
	DELETE FROM {s}.bodies WHERE id IN (SELECT id FROM d)
), c AS (
	UPDATE {s}.counts SET n = n - (SELECT count(*) FROM d) WHERE queue_id = $1 AND shard = {shard}
)
SELECT count(*) FROM d`),

		// The sweep deletes up to $3 expired messages of the queue, found
		// through bodies_expiry (a body row carries its message's queue and
		// expiry, written once by Put), so it reads no live message and
		// costs one index probe when nothing has expired. Messages another
		// statement holds locked are skipped. It also files up to $3 bodies
		// written without their queue and expiry (by a worker of schema
		// version 1 still running after the migration), of any queue, for
		// the next statement to find: one more probe of bodies_expiry
		// while there are none. It returns how many expired messages it
		// found, how many it deleted and how many bodies it filed.
		sweep: f(`
WITH v1 AS (
	UPDATE {s}.bodies b SET queue_id = m.queue_id, expires_at = m.expires_at
	FROM {s}.messages m
	WHERE b.id = ANY (ARRAY(
		SELECT id FROM {s}.bodies WHERE queue_id IS NULL LIMIT $3 FOR UPDATE SKIP LOCKED))
	  AND m.id = b.id
	RETURNING b.id
), x AS (
	SELECT id FROM {s}.bodies WHERE queue_id = $2 AND expires_at <= {now} LIMIT $3
), d AS (
	DELETE FROM {s}.messages WHERE ctid = ANY (ARRAY(
		SELECT ctid FROM {s}.messages
		WHERE id = ANY (ARRAY(SELECT id FROM x)) AND queue_id = $2 AND expires_at <= {now}
		FOR UPDATE SKIP LOCKED))
	RETURNING id
), b AS (
	DELETE FROM {s}.bodies WHERE id IN (SELECT id FROM d)
), c AS (
	UPDATE {s}.counts SET n = n - (SELECT count(*) FROM d)
	WHERE queue_id = $2 AND shard = {shard} AND EXISTS (SELECT 1 FROM d)
)
SELECT (SELECT count(*) FROM x), (SELECT count(*) FROM d), (SELECT count(*) FROM v1)`),
	}
	st.delTx = strings.Replace(st.del, "shard = "+shard, "shard = "+r.Replace(txShard), 1)
	return st
}
