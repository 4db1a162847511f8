package postgres

import "github.com/adaptq/adaptq/queue/driver"

var _ driver.Identifier = (*pgQueue)(nil)

// pgIdentity is a queue of one DB (a schema of one database): the queues
// opened by URL on one schema share their DB, so they share identities.
type pgIdentity struct {
	db *DB
	id int32
}

// Identity is the DB and the queue's row id.
func (q *pgQueue) Identity() any { return pgIdentity{q.db, q.st.id} }
