package sqlite

import "github.com/adaptq/adaptq/queue/driver"

var _ driver.Identifier = (*driverQueue)(nil)

// sqliteIdentity is a queue of one open DB: the queues opened by URL on
// one file share their DB (see shared), so they share identities too.
type sqliteIdentity struct {
	db  *DB
	qid int64
}

// Identity is the DB and the queue's row id.
func (q *driverQueue) Identity() any { return sqliteIdentity{q.db, q.qid} }
