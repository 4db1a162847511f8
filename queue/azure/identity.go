package azure

import "github.com/adaptq/adaptq/queue/driver"

var _ driver.Identifier = (*Queue)(nil)

// azureIdentity is a queue's URL, which names its account and name.
type azureIdentity struct{ url string }

// Identity is the queue's URL.
func (q *Queue) Identity() any { return azureIdentity{q.qc.URL()} }
