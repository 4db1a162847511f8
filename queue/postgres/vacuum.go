package postgres

import (
	"context"
)

// DefaultVacuumEvery is how many dead rows a DB's own statements make
// before it vacuums its tables. Every Get leaves one dead row version per
// message and every delete two (state and body); autovacuum visits a
// database at most once per autovacuum_naptime (1 min by default, a
// server-wide setting no table can shorten), so a queue draining 20,000
// messages a second would carry millions of dead rows between visits, and
// every Get's index scan would step over them. 100,000 dead rows is a few
// seconds of a busy queue, and a vacuum of them takes a fraction of that.
const DefaultVacuumEvery = 100_000

// WithVacuumEvery sets DefaultVacuumEvery's value for this DB; 0 leaves the
// tables to autovacuum alone.
func WithVacuumEvery(n int) Option {
	return func(o *options) {
		if n >= 0 {
			o.vacuumEvery = n
		}
	}
}

// churned counts n dead rows made by the DB's statements and starts a
// vacuum in the background when they reach the DB's threshold.
func (db *DB) churned(n int) {
	if db.vacuumEvery <= 0 || n <= 0 {
		return
	}
	if db.churn.Add(int64(n)) < int64(db.vacuumEvery) {
		return
	}
	if !db.vacuuming.CompareAndSwap(false, true) {
		return
	}
	db.churn.Store(0)
	if !db.background(func(ctx context.Context) { _ = db.Vacuum(ctx) }, func() { db.vacuuming.Store(false) }) {
		db.vacuuming.Store(false)
	}
}

// Vacuum vacuums the DB's tables now, skipping any that another process
// is vacuuming (VACUUM's SKIP_LOCKED: a vacuum holds its table's lock, and
// a second would wait for it), so that processes sharing a schema never
// vacuum a table at once. The DB calls it by itself every WithVacuumEvery
// dead rows; a program may call it too (after a Clear of a large queue,
// say). It takes no session lock of its own: behind PgBouncer in
// transaction pooling, a lock taken by one statement and released by
// another stays on the server connection that took it, and would make
// every later Vacuum skip its turn.
func (db *DB) Vacuum(ctx context.Context) error {
	s := quoteIdent(db.schema)
	_, err := db.pool.Exec(ctx, `VACUUM (SKIP_LOCKED) `+s+`.messages, `+s+`.bodies, `+s+`.counts`)
	return err
}

// Sweep deletes the expired messages of the queue called name now and
// returns how many it deleted. Calls that read a queue start a sweep by
// themselves (SweepInterval); a program that wants the storage back at
// once (after a long outage of its consumers, say) calls it.
func (db *DB) Sweep(ctx context.Context, name string) (int, error) {
	q, err := db.queue(ctx, name)
	if err != nil {
		return 0, err
	}
	return q.Sweep(ctx)
}
