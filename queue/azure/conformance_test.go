package azure_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/queuetest"
)

// TestConformance runs the contract's suite against Azurite over HTTP. The
// emulator keeps real time, so time-based cases sleep (whole seconds).
// Cases use distinct queue names, so they run in parallel (TestMain lets
// them all run at once): the time-based ones sleep beside the concurrency
// case, whose 5,000 messages keep Azurite busy for about half a minute.
func TestConformance(t *testing.T) {
	srv := azuritetest.Shared(t)
	queuetest.Run(t, func(t *testing.T) *queuetest.Harness {
		t.Parallel()
		// Reopen drops the account (its connections) and makes a new
		// one, as a restarted worker would.
		var mu sync.Mutex
		acct := newAccount(t, srv, azure.Config{})
		h := &queuetest.Harness{
			NewQueue: func(ctx context.Context, name string) (*queue.Queue, error) {
				mu.Lock()
				a := acct
				mu.Unlock()
				return a.Queue(ctx, name)
			},
			Reopen: func(context.Context) error {
				mu.Lock()
				defer mu.Unlock()
				if err := acct.Close(); err != nil {
					return err
				}
				acct = newAccount(t, srv, azure.Config{})
				return nil
			},
			Features: driver.Features{
				MaxPeek: queue.MaxPeek, MaxBody: azure.DefaultMaxBodySize, Siblings: true,
				Durability: driver.Replicated, Billed: true, TimeResolution: time.Second,
			},
		}
		if testing.Short() {
			h.ConcurrencyMessages = 1000
		}
		return h
	})
}

// newAccount is an account on srv's development account, closed at the
// end of the test.
func newAccount(t testing.TB, srv *azuritetest.Server, cfg azure.Config) *azure.Account {
	t.Helper()
	cfg.Account = azuritetest.Account
	if cfg.QueueEndpoint == "" {
		cfg.QueueEndpoint = srv.QueueEndpoint
	}
	if cfg.BlobEndpoint == "" {
		cfg.BlobEndpoint = srv.BlobEndpoint
	}
	a, err := azure.NewAccount(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}
