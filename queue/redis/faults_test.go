package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/queuetest"
	"github.com/adaptq/adaptq/queue/redis"
)

// TestFaults runs the fault layer, each case on a redis-server of its own
// (appendonly yes, appendfsync always: the setting that keeps every
// acknowledged write, so a restart keeps what the case wrote), reached by
// queue.Open with a redis:// URL whose host is the fault proxy's: the path
// a user's worker takes. Restart kills the server (SIGKILL) and starts it
// again from its AOF. Stored counts the queue's message hashes, expired
// ones included, as the server holds them. Skew moves the process's clock
// as the driver reads it (ids, the subscribers' timers); the scripts read
// the server's. Attempts is the driver's own: a put or a visibility update
// whose reply was lost is sent again (TestLostRepliesThroughTheURL covers
// those that then succeed).
func TestFaults(t *testing.T) {
	queuetest.RunFaults(t, func(t *testing.T) *queuetest.FaultHarness {
		s := startServer(t, "--appendonly", "yes", "--appendfsync", "always", "--hz", "100")
		proxy := queuetest.NewFaultProxy(t, s.Addr())
		prefix := testPrefix()
		url := func(addr, name string) string {
			return "redis://" + addr + "/0?queue=" + name + "&prefix=" + prefix
		}
		return &queuetest.FaultHarness{
			Proxy: proxy,
			Open: func(ctx context.Context, name string) (*queue.Queue, error) {
				return queue.Open(ctx, url(proxy.Addr(), name))
			},
			Direct: func(ctx context.Context, name string) (*queue.Queue, error) {
				return queue.Open(ctx, url(s.Addr(), name))
			},
			Restart: func(t *testing.T) { s.Restart() },
			Skew:    func(d time.Duration) { redis.SetSkew(d) },
			Stored: func(ctx context.Context, name string) (int, error) {
				n := 0
				for _, k := range s.Keys(prefix + "{" + name + "}:") {
					if strings.Contains(k, "}:m:") {
						n++
					}
				}
				return n, nil
			},
			DrainMessages: 2000,
			Attempts:      redis.DefaultAttempts,
			Features:      features,
		}
	})
}
