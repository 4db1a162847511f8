package poison_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/poison"
)

// slowGets makes each get take 25 s of the fake clock: a scan of a few
// hundred messages outlasts poison.ScanVisibility, and what it got first
// reappears while it still runs.
type slowGets struct {
	driver.Queue
	clock *clock.Fake
}

// Get serves the visible messages oldest put first, as Azure Queue
// Storage roughly does (the embedded backends serve them by when they
// became visible): a message whose hiding ran out comes before the ones
// never got. It gets every visible message, keeps the n put first and
// hands the rest straight back.
func (q slowGets) Get(ctx context.Context, n int, vis time.Duration) ([]*driver.Message, error) {
	defer q.clock.Advance(25 * time.Second)
	var all []*driver.Message
	for {
		ms, err := q.Queue.Get(ctx, q.Features().MaxBatch, vis)
		if err != nil {
			return nil, err
		}
		if len(ms) == 0 {
			break
		}
		all = append(all, ms...)
	}
	slices.SortFunc(all, func(a, b *driver.Message) int {
		x, _ := strconv.Atoi(a.ID)
		y, _ := strconv.Atoi(b.ID)
		return x - y
	})
	for _, m := range all[min(n, len(all)):] {
		if _, err := q.Queue.UpdateVisibility(ctx, m.ID, m.PopReceipt, 0); err != nil {
			return nil, err
		}
	}
	return all[:min(n, len(all))], nil
}

// A scan longer than ScanVisibility gets again messages it saw, whose
// hiding ran out: a get that returns only those does not mean the rest
// was seen. The listing shows every message, or says that it may not.
func TestListOutlastingTheScanVisibilityShowsEveryMessage(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Time{})
	s := memory.NewStore(memory.WithClock(fake))
	pq, err := s.Queue("orders-poison", queue.WithWrapper(func(d driver.Queue) driver.Queue { return slowGets{d, fake} }))
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	ids := poisonN(t, pq, n)
	p, err := poison.ListScan(context.Background(), pq, "", poison.MaxLimit)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Messages) != n && !p.Truncated {
		t.Fatalf("listed %d of %d messages, and did not say it is truncated", len(p.Messages), len(ids))
	}
}
