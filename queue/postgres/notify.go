package postgres

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// notifyLimiter rate-limits one queue's notifications from this process
// (see DefaultNotifyInterval).
type notifyLimiter struct {
	mu      sync.Mutex
	last    time.Time // when the newest notification was sent (or claimed)
	prev    time.Time // last before the newest claim, restored by unclaim
	pending bool      // a trailing notification is scheduled

	await    []int64 // ids put in callers' transactions, to notify once committed
	watching bool    // a commit watch round is scheduled for await
}

// claim reports whether a Put now may notify in its own statement: the
// interval since the last notification has passed.
func (l *notifyLimiter) claim(now time.Time, interval time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < interval {
		return false
	}
	l.prev, l.last = l.last, now
	return true
}

// unclaim gives back a claim whose Put failed.
func (l *notifyLimiter) unclaim() {
	l.mu.Lock()
	l.last = l.prev
	l.mu.Unlock()
}

// trailingNotify makes sure a notification for st leaves after the Put
// that just committed without one: at the end of the current interval, one
// for every Put that came within it.
func (db *DB) trailingNotify(st *queueState) {
	l := &st.n
	l.mu.Lock()
	if l.pending {
		l.mu.Unlock()
		return
	}
	l.pending = true
	wait := max(db.notify-wallNow().Sub(l.last), 0)
	l.mu.Unlock()
	db.background(func(bg context.Context) {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-bg.Done():
				t.Stop()
				return
			}
		}
		l.mu.Lock()
		l.pending = false
		l.last = wallNow()
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		defer cancel()
		// A failure here leaves the consumers to their safety polls; the
		// Put itself succeeded.
		_, _ = db.pool.Exec(ctx, db.sql.notify, db.channel, st.name)
	}, nil)
}

// awaitCommits watches id, put without a notification in a caller's
// transaction that has not committed yet: at the end of the queue's notify
// interval, a round takes every id so watched, waits for their
// transactions to end (committed), and notifies if any committed. A
// queue has one round at a time: ids put meanwhile wait for the next,
// which starts when it ends. So watching holds at most one connection of
// the pool per queue, for CommitWatchWait at most at a time: a round
// whose transactions are still open at that bound notifies for those
// that committed and leaves the open ones to the next round, so a long
// transaction delays the wake of the puts behind it by CommitWatchWait
// (and the interval) at most.
func (db *DB) awaitCommits(st *queueState, id int64) {
	l := &st.n
	l.mu.Lock()
	l.await = append(l.await, id)
	if l.watching {
		l.mu.Unlock()
		return
	}
	l.watching = true
	l.mu.Unlock()
	db.watchRound(st)
}

// watchRound runs one round for st after the rest of its notify
// interval, then the next if ids came meanwhile. st.n.watching is set.
func (db *DB) watchRound(st *queueState) {
	l := &st.n
	l.mu.Lock()
	wait := max(db.notify-wallNow().Sub(l.last), 0)
	l.mu.Unlock()
	started := db.background(func(bg context.Context) {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-bg.Done():
				t.Stop()
				return
			}
		}
		l.mu.Lock()
		ids := l.await
		l.await = nil
		l.mu.Unlock()
		woke, again := db.committed(bg, ids)
		if len(again) > 0 {
			l.mu.Lock()
			l.await = append(again, l.await...)
			l.mu.Unlock()
		}
		if woke {
			l.mu.Lock()
			l.last = wallNow()
			l.mu.Unlock()
			ctx, cancel := context.WithTimeout(bg, 10*time.Second)
			// A failure leaves the consumers to their safety polls.
			_, _ = db.pool.Exec(ctx, db.sql.notify, db.channel, st.name)
			cancel()
		}
		l.mu.Lock()
		next := len(l.await) > 0
		if !next {
			l.watching = false
		}
		l.mu.Unlock()
		if next {
			db.watchRound(st)
		}
	}, nil)
	if !started {
		l.mu.Lock()
		l.watching = false
		l.mu.Unlock()
	}
}

// CommitWatchWait bounds how long one commit watch round (awaitCommits)
// waits for the transactions it watches: a round whose transactions are
// still open then notifies if any of the others committed, and leaves the
// open ones to the next round. So a long (or forgotten) transaction that
// put a message delays the wake of the puts committed behind it by this
// much at most, not until it ends. 100 ms: a few notify intervals, well
// under a listener's latency target, and a round costs one statement.
const CommitWatchWait = 100 * time.Millisecond

// committed waits, up to CommitWatchWait, for the transactions that put
// ids to end, and reports whether any of them committed a message that is
// still there, and which ids to watch again (their transactions were
// still open at the bound). An error (the DB closing, a lost connection)
// reports true: a spurious wake costs a Get, a missed one a safety
// interval.
func (db *DB) committed(ctx context.Context, ids []int64) (bool, []int64) {
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return true, nil
	}
	// The transaction is always rolled back: it only waits. (Ended by
	// Close, the rollback closes the connection.)
	defer func() { _ = tx.Rollback(ctx) }()
	b := &pgx.Batch{}
	b.Queue("SET LOCAL lock_timeout = " + strconv.FormatInt(CommitWatchWait.Milliseconds(), 10))
	var absent int
	b.Queue(db.sql.awaitCommit, ids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			absent++
		}
		return rows.Err()
	})
	err = tx.SendBatch(ctx, b).Close()
	if err == nil {
		return absent < len(ids), nil
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "55P03" { // lock_not_available: a transaction still open
		return true, nil
	}
	_ = tx.Rollback(ctx)
	// Those committed (and not yet consumed) are visible now, without a
	// wait; the others are open, rolled back or consumed, and the next
	// round settles the last two at once.
	rows, err := db.pool.Query(ctx, db.sql.committedIDs, ids)
	if err != nil {
		return true, nil
	}
	seen, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return true, nil
	}
	again := make([]int64, 0, len(ids)-len(seen))
	for _, id := range ids {
		if !slices.Contains(seen, id) {
			again = append(again, id)
		}
	}
	return len(seen) > 0, again
}

// ListenApplicationName is the application_name of the LISTEN connection.
const ListenApplicationName = "adaptq-listen"

// Backoff of the LISTEN connection's reconnects.
const (
	listenBackoffMin = 100 * time.Millisecond
	listenBackoffMax = 30 * time.Second
	// listenKeepAlive is the TCP keepalive of the LISTEN connection: a
	// connection that died without a word (a host gone, a NAT that forgot
	// it) is noticed within about a minute, with no SQL sent, so an idle
	// worker makes no calls for it.
	listenKeepAlive = 30 * time.Second
)

// hub serves every Subscribe of a DB with one dedicated connection that
// LISTENs on the schema's channel ("adaptq:" + schema; the payload is the
// queue's name). It connects when the first subscriber comes and
// disconnects when the last leaves; a lost connection is reopened with
// backoff, and every subscriber is woken once it is back, since
// notifications sent in between are lost.
type hub struct {
	db  *DB
	cfg *pgx.ConnConfig

	mu      sync.Mutex
	subs    map[string]map[chan struct{}]struct{}
	n       int
	cancel  context.CancelFunc
	done    chan struct{}
	closed  bool
	connect int // successful LISTENs, for tests
}

func newHub(db *DB, cfg *pgx.ConnConfig) *hub {
	d := &net.Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: listenKeepAlive, Interval: 10 * time.Second, Count: 3}}
	if cfg.DialFunc == nil || cfg.ConnectTimeout > 0 {
		d.Timeout = cfg.ConnectTimeout
	}
	cfg.DialFunc = d.DialContext
	// Named, so an operator sees it in pg_stat_activity; no statement
	// cache: the connection only LISTENs.
	cfg.RuntimeParams["application_name"] = ListenApplicationName
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	return &hub{db: db, cfg: cfg, subs: map[string]map[chan struct{}]struct{}{}}
}

// subscribe adds a subscriber to the queue name until ctx ends.
func (h *hub) subscribe(ctx context.Context, name string) <-chan struct{} {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ch
	}
	if h.subs[name] == nil {
		h.subs[name] = map[chan struct{}]struct{}{}
	}
	h.subs[name][ch] = struct{}{}
	h.n++
	if h.cancel == nil {
		h.start()
	}
	h.mu.Unlock()
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[name][ch]; !ok {
			return
		}
		delete(h.subs[name], ch)
		if len(h.subs[name]) == 0 {
			delete(h.subs, name)
		}
		h.n--
		if h.n == 0 && h.cancel != nil {
			h.cancel()
			h.cancel = nil
		}
	})
	return ch
}

// start runs the listening loop; h.mu is held.
func (h *hub) start() {
	ctx, cancel := context.WithCancel(h.db.bg)
	h.cancel = cancel
	prev := h.done
	done := make(chan struct{})
	h.done = done
	h.db.wg.Add(1)
	go func() {
		defer h.db.wg.Done()
		defer close(done)
		if prev != nil {
			<-prev // the previous loop's connection is closed first
		}
		h.run(ctx)
	}()
}

func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	if h.cancel != nil {
		h.cancel()
		h.cancel = nil
	}
	h.mu.Unlock()
}

// wake signals the subscribers of name, or all of them for "".
func (h *hub) wake(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	signal := func(set map[chan struct{}]struct{}) {
		for ch := range set {
			select {
			case ch <- struct{}{}:
			default: // one is pending already
			}
		}
	}
	if name != "" {
		signal(h.subs[name])
		return
	}
	for _, set := range h.subs {
		signal(set)
	}
}

// run keeps a LISTEN connection until ctx ends.
func (h *hub) run(ctx context.Context) {
	backoff := listenBackoffMin
	for ctx.Err() == nil {
		err := h.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == errListenedOK {
			backoff = listenBackoffMin
		}
		// Full jitter, so that the workers of a restarted server do not
		// reconnect in step.
		d := time.Duration(rand.Int64N(int64(backoff))) + listenBackoffMin/2
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, listenBackoffMax)
	}
}

// errListenedOK: the connection listened before it was lost.
var errListenedOK = errorString("postgres: listen connection lost")

type errorString string

func (e errorString) Error() string { return string(e) }

// listen connects, LISTENs and dispatches notifications until the
// connection fails or ctx ends.
func (h *hub) listen(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, err := pgx.ConnectConfig(cctx, h.cfg.Copy())
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(cctx)
		cancel()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+quoteIdent(h.db.channel)); err != nil {
		return err
	}
	h.mu.Lock()
	h.connect++
	h.mu.Unlock()
	// Puts made while no connection listened were not heard.
	h.wake("")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return errListenedOK
		}
		h.wake(n.Payload)
	}
}

// listens reports how many times the hub's connection has LISTENed.
func (h *hub) listens() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.connect
}
