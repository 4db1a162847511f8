package redis

import "github.com/adaptq/adaptq/queue/driver"

var _ driver.Identifier = (*redisQueue)(nil)

// redisIdentity is a queue's keys on one Client: the queues opened by URL
// on one server share their Client, so they share identities.
type redisIdentity struct {
	c    *Client
	base string
}

// Identity is the client and the queue's key prefix.
func (q *redisQueue) Identity() any { return redisIdentity{q.c, q.base} }
