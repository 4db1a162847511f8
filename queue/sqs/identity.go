package sqs

import "github.com/adaptq/adaptq/queue/driver"

var _ driver.Identifier = (*Queue)(nil)

// sqsIdentity is a queue's URL, which names its region, account and name.
type sqsIdentity struct{ url string }

// Identity is the queue's URL.
func (q *Queue) Identity() any { return sqsIdentity{q.url} }
