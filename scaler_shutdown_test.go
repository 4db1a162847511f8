package adaptq

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// hangingCount is a queue whose Count waits for its context to end, and
// says when it returned.
type hangingCount struct {
	driver.Queue
	started chan struct{}
	ended   *atomic.Bool
}

func (h hangingCount) Count(ctx context.Context) (int, error) {
	h.started <- struct{}{}
	<-ctx.Done()
	h.ended.Store(true)
	return 0, ctx.Err()
}

// A depth read in flight when Run's context ends ends with Run: Run
// returns only once the read has returned, and no read outlives it
// (it would go on against a queue Run has closed, for up to the read's
// timeout).
func TestScalerReadsEndWithRun(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("scaler-shutdown")
	var ended atomic.Bool
	started := make(chan struct{}, 1)
	s, err := NewScaler(testConfig(t, `
admin: {address: "127.0.0.1:0"}
queues:
  - url: memory://`+name+`
    handler: 'exec: cat'
`), WithLogger(zap.NewNop()), withClock(clock.NewFake(time.Time{})), withQueueOptions(queue.WithWrapper(func(d driver.Queue) driver.Queue {
		return hangingCount{Queue: d, started: started, ended: &ended}
	})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	// A request whose client goes away: the shared read goes on without it.
	reqCtx, hangUp := context.WithCancel(context.Background())
	go func() { _, _ = s.Scaling(reqCtx) }()
	<-started
	hangUp()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(testutil.HangGuard):
		t.Fatal("Run did not return")
	}
	if !ended.Load() {
		t.Error("Run returned while a depth read was still in flight")
	}
}
