package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
)

// SQLiteRiverTarget: adaptq's listener with its default options drains
// 200-byte messages from SQLite at least this many times as fast as River
// on SQLite (issue 34).
const SQLiteRiverTarget = 15.0

// River on SQLite (riverdriver/riversqlite, the version of river) with its
// best public settings: one connection, as the driver's doc asks for SQLite,
// MaxWorkers riverSQLiteWorkers, FetchCooldown riverSQLiteCooldown and the
// FetchPollInterval of the PostgreSQL runs; the fill with InsertMany, which
// this driver runs one row at a time (its doc says so), not timed.
const (
	riverSQLiteWorkers  = 100
	riverSQLiteCooldown = time.Millisecond
)

// runRiverSQLite fills a fresh SQLite file (goqite's pragmas: adaptq's) with
// n River jobs of body and works them with River's client, timing from
// Start to the n-th completion event.
func runRiverSQLite(ctx context.Context, path string, n int, body []byte) (drainStat, error) {
	db, err := sql.Open("sqlite", goqiteDSN(path))
	if err != nil {
		return drainStat{}, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	drv := riversqlite.New(db)
	m, err := rivermigrate.New(drv, nil)
	if err != nil {
		return drainStat{}, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return drainStat{}, fmt.Errorf("river migrate: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, riverNoop{})
	c, err := river.NewClient(drv, &river.Config{
		FetchCooldown:     riverSQLiteCooldown,
		FetchPollInterval: riverFetchPollInterval,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverSQLiteWorkers}},
		Workers:           workers,
	})
	if err != nil {
		return drainStat{}, err
	}
	args := riverArgs{Body: string(body)}
	batch := make([]river.InsertManyParams, 0, 1000)
	for left := n; left > 0; {
		k := min(left, 1000)
		batch = batch[:0]
		for range k {
			batch = append(batch, river.InsertManyParams{Args: args})
		}
		if _, err := c.InsertMany(ctx, batch); err != nil {
			return drainStat{}, fmt.Errorf("river fill: %w", err)
		}
		left -= k
	}
	events, cancelSub := c.SubscribeConfig(&river.SubscribeConfig{ChanSize: n + 1000, Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed}})
	defer cancelSub()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var d time.Duration
	failed := 0
	var use usage
	written, err := measureWrites(n, func() (err error) {
		use, err = span(func() error {
			start := time.Now()
			if err := c.Start(runCtx); err != nil {
				return err
			}
			limit := time.After(10 * time.Minute)
			for done := 0; done < n; {
				select {
				case ev := <-events:
					if ev == nil {
						return errors.New("river: subscription closed")
					}
					if ev.Kind == river.EventKindJobFailed {
						failed++
					}
					done++
				case <-limit:
					return fmt.Errorf("river worked %d of %d jobs: %w", done, n, errTimeout)
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			d = time.Since(start)
			return nil
		})
		return err
	})
	stopCtx, stopCancel := context.WithTimeout(context.Background(), time.Minute)
	defer stopCancel()
	_ = c.Stop(stopCtx)
	if err != nil {
		return drainStat{}, err
	}
	if failed > 0 {
		return drainStat{}, fmt.Errorf("river: %d jobs failed", failed)
	}
	return drainStat{rate: rate(n, d), written: written, duration: d, use: use}, nil
}
