package redis_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/queuetest"
	"github.com/adaptq/adaptq/queue/redis"
)

var features = driver.Features{
	MaxPeek: queue.MaxPeek, ExactCount: true, BatchDelete: true, Siblings: true,
	NativeNotify: true, Durability: driver.ServerMemory, TimeResolution: time.Microsecond,
	Metadata: driver.DefaultMetadataLimits, BusyTasks: redis.BusyTasks,
}

// harness opens queues on the test server under a prefix of their own.
// With a fake clock the scripts read it (virtual time); without one they
// read the server's clock and the suite sleeps. Reopen closes the client
// and opens another, as a worker's restart would: the messages stay on
// the server.
func harness(t *testing.T, c *clock.Fake) *queuetest.Harness {
	prefix := testPrefix()
	rdb := server(t, prefix)
	var opts []redis.Option
	opts = append(opts, redis.WithKeyPrefix(prefix))
	if c != nil {
		opts = append(opts, redis.WithClock(c))
	}
	var (
		mu  sync.Mutex
		cli = redis.New(rdb, opts...)
	)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		_ = cli.Close()
	})
	h := &queuetest.Harness{
		NewQueue: func(_ context.Context, name string) (*queue.Queue, error) {
			mu.Lock()
			defer mu.Unlock()
			return cli.Queue(name)
		},
		Features: features,
		Reopen: func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if err := cli.Close(); err != nil {
				return err
			}
			cli = redis.New(rdb, opts...)
			return nil
		},
	}
	if c != nil {
		h.Advance = c.Advance
	}
	return h
}

// TestConformance runs the contract's suite on the real server in virtual
// time.
func TestConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) *queuetest.Harness {
		return harness(t, clock.NewFake(clock.Epoch))
	})
}

// TestConformanceServerClock runs it again on the server's own clock, the
// production setting: the time-based cases sleep, in whole seconds, so its
// cases run in parallel (each on a key prefix of its own), beside the
// other tests, and not in -short mode.
func TestConformanceServerClock(t *testing.T) {
	if testing.Short() {
		t.Skip("sleeps for about a minute; the virtual-time run covers the contract in -short mode")
	}
	t.Parallel()
	queuetest.RunParallel(t, func(t *testing.T) *queuetest.Harness {
		return harness(t, nil)
	})
}
