package azure_test

import (
	"context"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/queuetest"
)

// TestFaults runs the fault layer on an Azurite of its own: queues open
// through queue.Open with an azure:// URL whose queue endpoint is the
// fault proxy's, the path a user's worker takes. The cases run one after
// another, since Restart restarts the queue service (Azurite saves its
// database on SIGTERM and reads it back: messages, visibility and dequeue
// counts survive). ClockSkew does not apply: the driver decides nothing by
// this host's clock (visibility and TTL are Azure's, kept by the server),
// which dates only claim-check payloads' expiry, swept an hour
// (Config.PayloadGrace) after it.
func TestFaults(t *testing.T) {
	t.Parallel()
	srv := azuritetest.Start(t)
	queuetest.RunFaults(t, func(t *testing.T) *queuetest.FaultHarness {
		proxy := queuetest.NewFaultProxy(t, srv.QueueAddr)
		return &queuetest.FaultHarness{
			Proxy: proxy,
			Open: func(ctx context.Context, name string) (*queue.Queue, error) {
				return queue.Open(ctx, srv.URL(name, "endpoint", "http://"+proxy.Addr()+"/"+azuritetest.Account))
			},
			Direct: func(ctx context.Context, name string) (*queue.Queue, error) {
				return queue.Open(ctx, srv.URL(name))
			},
			Restart: func(t *testing.T) {
				if err := srv.RestartQueue(); err != nil {
					t.Fatal(err)
				}
			},
			LazyExpiry: "Azurite removes expired messages when a Get, Peek, Delete or Update meets the queue, and counts them until then (Azure's count " +
				"\"is not lower than the actual number of messages in the queue, but could be higher\")",
			Features: driver.Features{
				MaxPeek: queue.MaxPeek, MaxBody: 0, Siblings: true,
				Durability: driver.Replicated, Billed: true, TimeResolution: time.Second,
			},
		}
	})
}
