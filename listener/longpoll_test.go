package listener_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/meter"
)

// eagerPoller declares long polling (as SQS does) over the memory driver,
// whose Get answers at once: a long poll that never holds the call.
type eagerPoller struct {
	driver.Queue
	mu    sync.Mutex
	waits []time.Duration
}

func (e *eagerPoller) Features() driver.Features {
	f := e.Queue.Features()
	f.LongPoll = 20 * time.Second
	return f
}

func (e *eagerPoller) Get(ctx context.Context, n int, vis time.Duration) ([]*driver.Message, error) {
	e.mu.Lock()
	e.waits = append(e.waits, driver.Wait(ctx))
	e.mu.Unlock()
	return e.Queue.Get(ctx, n, vis)
}

func (e *eagerPoller) longPolls() (n int, longest time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, w := range e.waits {
		if w > 0 {
			n++
			longest = max(longest, w)
		}
	}
	return n, longest
}

// Where the backend long-polls, an idle task's waits become the gets'
// waits, at most LongPoll; and a long poll that comes back early is slept
// out, so an idle hour costs one get per LongPoll (180), not a busy loop.
func TestIdleWaitsAreLongPolls(t *testing.T) {
	ep := &eagerPoller{}
	f := newFixtureWith(t, newRecorder().handle, listener.Options{Tasks: 1, MinTasks: 1, MaxTasks: 1},
		func(q driver.Queue) driver.Queue { ep.Queue = q; return ep })
	f.start()
	// Past the backoff's growth to the 20 s cap (the default idle.max is 1 min).
	for end := f.clock.Now().Add(5 * time.Minute); f.clock.Now().Before(end); {
		f.settle()
		f.clock.AdvanceToNext()
	}
	before := f.meter.Snapshot().Gets()
	for end := f.clock.Now().Add(time.Hour); f.clock.Now().Before(end); {
		f.settle()
		f.clock.AdvanceToNext()
	}
	gets := f.meter.Snapshot().Gets() - before
	if gets < 175 || gets > 185 {
		t.Errorf("%d gets in an idle hour, want 180 (one 20 s long poll after another)", gets)
	}
	n, longest := ep.longPolls()
	if n == 0 || longest != 20*time.Second {
		t.Fatalf("%d long polls, the longest %s; want the idle waits as 20 s long polls", n, longest)
	}
	// Work is still found.
	f.put(1)
	f.settle()
	f.clock.AdvanceToNext()
	eventually(t, "the message is deleted", func() bool { return f.l.Stats().Deleted == 1 })
	if s := f.meter.Snapshot(); s.Calls[meter.Get] != 1 {
		t.Errorf("%d non-empty gets, want 1", s.Calls[meter.Get])
	}
}
