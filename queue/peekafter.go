package queue

import (
	"context"
	"fmt"

	"github.com/adaptq/adaptq/queue/driver"
)

// PeekPages reports whether PeekAfter works: the backend can peek page by
// page (driver.PeekPager), beyond the first Features().MaxPeek messages
// that Peek shows.
func (q *Queue) PeekPages() bool {
	_, ok := q.d.(driver.PeekPager)
	return ok && q.f.MaxPeek > 0
}

// PeekAfter is Peek page by page: up to n (1..Features().MaxPeek) visible
// messages that come after the message whose id is after ("" for the
// first page), in the order they were put, without hiding them or changing
// their receipts or dequeue counts. Each call is one backend call, metered
// as a peek, whatever the queue holds. A backend that cannot
// (PeekPages false) returns ErrUnsupported; an after the backend never
// gave is ErrInvalidArgument.
func (q *Queue) PeekAfter(ctx context.Context, after string, n int) ([]*Message, error) {
	if err := q.begin(ctx, OpPeek); err != nil {
		return nil, err
	}
	pp, ok := q.d.(driver.PeekPager)
	if !ok || q.f.MaxPeek == 0 {
		return nil, q.reject(OpPeek, fmt.Errorf("%w: %s cannot peek page by page", ErrUnsupported, q.f.Name))
	}
	if n < 1 || n > q.f.MaxPeek {
		return nil, q.reject(OpPeek, fmt.Errorf("%w: peek of %d is outside 1..%d", ErrBatchSize, n, q.f.MaxPeek))
	}
	ms, err := pp.PeekAfter(ctx, after, n)
	if err == nil {
		ms, err = checkOutput(ms, n)
	}
	if err != nil {
		return nil, q.fail(ctx, OpPeek, 0, err)
	}
	q.observe(OpPeek, len(ms), nil)
	return messages(ms), nil
}
