package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
	"github.com/adaptq/adaptq/queue/queuetest"
)

// features are what the driver promises.
var features = driver.Features{
	MaxPeek: queue.MaxPeek, BatchDelete: true, Siblings: true,
	NativeNotify: true, Durability: driver.PowerLoss, TimeResolution: time.Microsecond,
	Metadata: driver.DefaultMetadataLimits, BusyTasks: postgres.BusyTasks,
}

// TestConformance runs the contract's suite on the real server, each case
// in a schema of its own, in virtual time (the DB computes times from a
// fake clock); Reopen closes the DB and opens it again, as a process
// restart would.
func TestConformance(t *testing.T) {
	url := pgtest.URL(t)
	queuetest.Run(t, func(t *testing.T) *queuetest.Harness {
		schema := pgtest.Schema(t)
		c := clock.NewFake(clock.Epoch)
		var (
			mu sync.Mutex
			db *postgres.DB
		)
		open := func(ctx context.Context) error {
			d, err := postgres.Open(ctx, url, postgres.WithSchema(schema), postgres.WithClock(c))
			if err != nil {
				return err
			}
			mu.Lock()
			db = d
			mu.Unlock()
			return nil
		}
		if err := open(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			mu.Lock()
			defer mu.Unlock()
			_ = db.Close()
		})
		return &queuetest.Harness{
			NewQueue: func(ctx context.Context, name string) (*queue.Queue, error) {
				mu.Lock()
				defer mu.Unlock()
				return db.Queue(ctx, name)
			},
			Advance:  c.Advance,
			Features: features,
			Reopen: func(ctx context.Context) error {
				mu.Lock()
				err := db.Close()
				mu.Unlock()
				if err != nil {
					return err
				}
				return open(ctx)
			},
			ConcurrencyMessages: 2000,
		}
	})
}
