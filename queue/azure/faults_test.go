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

// TestFaults runs the fault layer beside the package's other tests, its
// cases in parallel on the shared Azurite (queue names of their own: one
// server less to load, which takes Node 10 s of CPU at load 16) and
// Restart on one of its own:
// queues open through queue.Open with an azure:// URL whose queue endpoint
// is the fault proxy's, the path a user's worker takes. Restart restarts
// the queue service, which saves its database on SIGTERM and reads it back:
// messages, visibility and dequeue counts survive. ClockSkew does not
// apply: the driver decides nothing by this host's clock (visibility and
// TTL are Azure's, kept by the server, and claim-check payloads are swept
// by the blob service's clock: TestSweepIgnoresHostClocks).
func TestFaults(t *testing.T) {
	restartable := azuritetest.Prestart(t, azuritetest.Options{}) // while the serial tests run
	t.Parallel()
	harness := func(t *testing.T, srv *azuritetest.Server) *queuetest.FaultHarness {
		proxy := queuetest.NewFaultProxy(t, srv.QueueAddr)
		return &queuetest.FaultHarness{
			Proxy: proxy,
			Open: func(ctx context.Context, name string) (*queue.Queue, error) {
				return queue.Open(ctx, srv.URL(name, "endpoint", "http://"+proxy.Addr()+"/"+azuritetest.Account))
			},
			Direct: func(ctx context.Context, name string) (*queue.Queue, error) {
				return queue.Open(ctx, srv.URL(name))
			},
			LazyExpiry: "Azurite removes expired messages when a Get, Peek, Delete or Update meets the queue, and counts them until then (Azure's count " +
				"\"is not lower than the actual number of messages in the queue, but could be higher\")",
			Features: driver.Features{
				MaxPeek: queue.MaxPeek, Siblings: true,
				Durability: driver.Replicated, Billed: true, TimeResolution: time.Second,
			},
		}
	}
	srv := azuritetest.Shared(t)
	queuetest.RunFaults(t, func(t *testing.T) *queuetest.FaultHarness {
		t.Parallel()
		h := harness(t, srv)
		h.Restartable = func(t *testing.T) *queuetest.FaultHarness {
			own := restartable(t)
			r := harness(t, own)
			r.Restart = func(t *testing.T) {
				if err := own.RestartQueue(); err != nil {
					t.Fatal(err)
				}
			}
			return r
		}
		return h
	})
}
