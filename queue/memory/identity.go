package memory

import "github.com/adaptq/adaptq/queue/driver"

var _ driver.Identifier = (*memQueue)(nil)

// memIdentity is a queue of one Store.
type memIdentity struct {
	s    *Store
	name string
}

// Identity is the store and the queue's name.
func (q *memQueue) Identity() any { return memIdentity{q.s, q.name} }
