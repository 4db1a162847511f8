package postgres

import (
	"context"
	"time"
)

// Listens reports how many times db's LISTEN connection has been
// established.
func Listens(db *DB) int { return db.hub.listens() }

// GetSQL is the statement a Get of db runs.
func GetSQL(db *DB) string { return db.sql.get }

// NowArg is the time db's statements compute from (nil: the server's).
func NowArg(db *DB) any { return db.nowArg() }

// SetClientSkew makes every reading of the client's clock the driver makes
// run d ahead (0: none).
func SetClientSkew(d time.Duration) { clientSkew.Store(int64(d)) }

// SweepTurn runs one background turn of the sweep of db's queue name: at
// most turn statements of batch messages each.
func SweepTurn(ctx context.Context, db *DB, name string, batch, turn int) (int, error) {
	q, err := db.queue(ctx, name)
	if err != nil {
		return 0, err
	}
	return q.sweep(ctx, batch, turn)
}

// SetNotifyAgo makes the newest notification of db's queue name d ago.
func SetNotifyAgo(db *DB, name string, d time.Duration) {
	db.mu.Lock()
	st := db.queues[name]
	db.mu.Unlock()
	st.n.mu.Lock()
	st.n.last = wallNow().Add(-d)
	st.n.mu.Unlock()
}

// Watching reports whether a commit watch round of db's queue name is
// scheduled.
func Watching(db *DB, name string) bool {
	db.mu.Lock()
	st := db.queues[name]
	db.mu.Unlock()
	st.n.mu.Lock()
	defer st.n.mu.Unlock()
	return st.n.watching
}
