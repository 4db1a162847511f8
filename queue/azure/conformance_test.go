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
// them all run at once), and the test itself runs beside the package's
// other parallel tests (TestFaults, TestEntra, the listener's), which
// sleep on Azurite's clock as much as these do.
//
// The concurrency case drains 1,000 messages, as the SQS emulator's suite
// does, not the suite's 5,000: Azurite serves one request at a time on
// one Node event loop, so what the case checks of the driver (8 consumers
// sharing an account, none getting a message another holds, every
// message got and deleted once) is exercised by the first few dozen
// overlapping Gets and Deletes; the 4,000 more only multiplied its
// running time (some 150 s on a quiet 2-core machine, past 8 minutes at
// load 28) by five.
func TestConformance(t *testing.T) {
	t.Parallel()
	srv := azuritetest.Shared(t)
	queuetest.Run(t, func(t *testing.T) *queuetest.Harness {
		t.Parallel()
		// Reopen drops the account (its connections) and makes a new
		// one, as a restarted worker would.
		//
		// The suite names its queues itself, the same in every run, and the
		// shared Azurite keeps them from one run to the next (go test
		// -count=2): at the end of a case every queue it opened is emptied
		// (with its payload blobs), so that the next run starts as on a
		// fresh server.
		var mu sync.Mutex
		acct := newAccount(t, srv, azure.Config{})
		opened := map[string]bool{}
		t.Cleanup(func() {
			a, err := azure.NewAccount(azure.Config{Account: azuritetest.Account, QueueEndpoint: srv.QueueEndpoint, BlobEndpoint: srv.BlobEndpoint, Timeout: testTimeout})
			if err != nil {
				t.Error(err)
				return
			}
			defer a.Close()
			for name := range opened {
				q, err := a.Queue(context.Background(), name)
				if err != nil {
					continue // a name the suite meant to be refused
				}
				if err := q.Clear(context.Background()); err != nil {
					t.Errorf("emptying %s for the next run: %v", name, err)
				}
				_ = q.Close()
			}
		})
		h := &queuetest.Harness{
			NewQueue: func(ctx context.Context, name string) (*queue.Queue, error) {
				mu.Lock()
				a := acct
				opened[name] = true
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
				Durability: driver.Replicated, Billed: true, TimeResolution: time.Second, Metadata: claimCheckMetadata(),
			},
			ConcurrencyMessages: azuriteConcurrencyMessages,
		}
		return h
	})
}

// azuriteConcurrencyMessages is how many messages the concurrency case
// drains on Azurite (see TestConformance).
const azuriteConcurrencyMessages = 1000

// testTimeout bounds each request of the tests' accounts unless a test
// sets its own: a hang guard, generous enough that a request does not time
// out on a machine kept busy by other work (a timed-out get may have taken
// messages, which then stay hidden for their visibility timeout).
const testTimeout = 5 * time.Minute

// newAccount is an account on srv's development account, closed at the
// end of the test.
func newAccount(t testing.TB, srv *azuritetest.Server, cfg azure.Config) *azure.Account {
	t.Helper()
	cfg.Account = azuritetest.Account
	if cfg.Timeout == 0 {
		cfg.Timeout = testTimeout
	}
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
