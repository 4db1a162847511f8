package sqlite_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/queuetest"
	"github.com/adaptq/adaptq/queue/sqlite"
)

// TestConformance runs the contract's suite on a real database file per
// case, in virtual time; Reopen closes the file and opens it again, as a
// process restart would.
func TestConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) *queuetest.Harness {
		c := clock.NewFake(clock.Epoch)
		path := filepath.Join(t.TempDir(), "conformance.db")
		var (
			mu sync.Mutex
			db *sqlite.DB
		)
		open := func() error {
			d, err := sqlite.Open(path, sqlite.WithClock(c))
			if err != nil {
				return err
			}
			mu.Lock()
			db = d
			mu.Unlock()
			return nil
		}
		if err := open(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			mu.Lock()
			defer mu.Unlock()
			if err := db.Close(); err != nil {
				t.Error(err)
			}
		})
		return &queuetest.Harness{
			NewQueue: func(_ context.Context, name string) (*queue.Queue, error) {
				mu.Lock()
				defer mu.Unlock()
				return db.Queue(name)
			},
			Advance: c.Advance,
			Features: driver.Features{
				MaxPeek: queue.MaxPeek, ExactCount: true, BatchDelete: true, Siblings: true,
				Durability: driver.ProcessCrash, Metadata: driver.DefaultMetadataLimits,
			},
			Reopen: func(context.Context) error {
				mu.Lock()
				err := db.Close()
				mu.Unlock()
				if err != nil {
					return err
				}
				return open()
			},
		}
	})
}
