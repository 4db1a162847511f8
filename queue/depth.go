package queue

import (
	"context"
	"time"

	"github.com/adaptq/adaptq/queue/driver"
)

// Depth is a queue's depth at one moment, as Queue.Depth reads it.
type Depth struct {
	// Messages is every unexpired message, visible or not: Count's number.
	Messages int
	// Split is set when the backend tells visible messages from those in
	// flight (driver.DepthReader); Visible and InFlight are zero otherwise.
	Split bool
	// Visible messages a Get would return now; InFlight are hidden (got
	// and not yet deleted, or put with a delay not yet over).
	Visible, InFlight int
	// Oldest is when the oldest message was put; zero when the queue is
	// empty or the backend cannot tell cheaply.
	Oldest time.Time
}

// Depth reads the queue's depth in one backend call, metered as a Count:
// visible and in flight apart, with the oldest message's age, where the
// driver can tell them cheaply (driver.DepthReader), else Count's total
// alone. On a billed backend each call costs a transaction, so callers
// that poll it (metrics) read it at an interval, not per request.
func (q *Queue) Depth(ctx context.Context) (Depth, error) {
	if err := q.begin(ctx, OpCount); err != nil {
		return Depth{}, err
	}
	dr, ok := q.d.(driver.DepthReader)
	if !ok {
		n, err := q.d.Count(ctx)
		if err != nil {
			return Depth{}, q.fail(ctx, OpCount, 0, err)
		}
		q.observe(OpCount, n, nil)
		return Depth{Messages: n}, nil
	}
	d, err := dr.Depth(ctx)
	if err != nil {
		return Depth{}, q.fail(ctx, OpCount, 0, err)
	}
	v, f := max(d.Visible, 0), max(d.InFlight, 0)
	q.observe(OpCount, v+f, nil)
	return Depth{Messages: v + f, Split: true, Visible: v, InFlight: f, Oldest: d.Oldest}, nil
}
