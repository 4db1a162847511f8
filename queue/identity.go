package queue

import (
	"reflect"

	"github.com/adaptq/adaptq/queue/driver"
)

// SameQueue reports whether q and other are handles on one queue of one
// backend: a poison queue's messages may go back only to the queues that
// poison onto that very queue, and two backends may each have a queue of
// the same name. It is false when a driver cannot tell (it does not
// implement driver.Identifier), so a check built on it refuses rather
// than trusts a name.
func (q *Queue) SameQueue(other *Queue) bool {
	if q == nil || other == nil {
		return false
	}
	if q == other {
		return true
	}
	a, ok := q.raw.(driver.Identifier)
	if !ok {
		return false
	}
	b, ok := other.raw.(driver.Identifier)
	if !ok {
		return false
	}
	x, y := a.Identity(), b.Identity()
	if x == nil || y == nil || reflect.TypeOf(x) != reflect.TypeOf(y) || !reflect.TypeOf(x).Comparable() {
		return false
	}
	return x == y
}
