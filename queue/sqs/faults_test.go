package sqs_test

import (
	"context"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/queuetest"
	"github.com/adaptq/adaptq/queue/sqs/sqstest"
)

// TestFaults runs the fault layer on a fauxqs of its own, each case in a
// region of its own: queues open through queue.Open with an sqs:// URL
// whose endpoint is the fault proxy's, the path a user's worker takes. The
// cases run one after another, since ClockSkew moves the server's clock
// (the client's then runs ahead of it, as a consumer's fast clock would,
// whatever the driver or the SDK reads). Restart does not apply: fauxqs
// keeps its state in memory, so a restarted one is empty (SQS itself is
// never restarted under a client).
func TestFaults(t *testing.T) {
	t.Parallel()
	srv := sqstest.StartWith(t, sqstest.Options{ClockControl: true})
	queuetest.RunFaults(t, func(t *testing.T) *queuetest.FaultHarness {
		region := sqstest.NewRegion()
		proxy := queuetest.NewFaultProxy(t, srv.Addr)
		return &queuetest.FaultHarness{
			Proxy: proxy,
			Open: func(ctx context.Context, name string) (*queue.Queue, error) {
				return queue.Open(ctx, srv.URL(region, name, "endpoint", "http://"+proxy.Addr()))
			},
			Direct: func(ctx context.Context, name string) (*queue.Queue, error) {
				return queue.Open(ctx, srv.URL(region, name))
			},
			Skew: func(d time.Duration) {
				if err := srv.SetClockOffset(-d); err != nil {
					t.Error(err)
				}
			},
			LazyExpiry: "SQS keeps no per-message TTL: the driver's Gets delete what SQS's clock shows expired, and SQS counts a message until then",
			Features:   features,
		}
	})
}
