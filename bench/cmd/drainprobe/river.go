package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
)

// River on SQLite (riverdriver/riversqlite, the same version as river),
// with its best public settings: one connection, as the driver's doc asks
// for SQLite ("set the maximum pool size to one connection"), MaxWorkers
// 100, a FetchCooldown of 1 ms and a FetchPollInterval of 20 ms; the fill
// with InsertMany (which this driver runs one row at a time, its doc says).
// The same pragmas as goqite's side: WAL, synchronous NORMAL, a 5 s busy
// timeout, BEGIN IMMEDIATE, temp_store MEMORY.
const (
	riverMaxWorkers        = 100
	riverFetchCooldown     = time.Millisecond
	riverFetchPollInterval = 20 * time.Millisecond
)

type riverArgs struct {
	Body string `json:"body"`
}

func (riverArgs) Kind() string { return "drainprobe" }

type riverNoop struct {
	river.WorkerDefaults[riverArgs]
}

func (riverNoop) Work(context.Context, *river.Job[riverArgs]) error { return nil }

func riverSide(ctx context.Context, dir string, n int, body []byte, fillOnly bool) (time.Duration, time.Duration, error) {
	v := url.Values{}
	v.Set("_busy_timeout", "5000")
	v.Set("_journal_mode", "WAL")
	v.Set("_synchronous", "NORMAL")
	v.Set("_txlock", "immediate")
	v.Add("_pragma", "temp_store(MEMORY)")
	db, err := sql.Open("sqlite", (&url.URL{Scheme: "file", Path: filepath.Join(dir, "r.db"), RawQuery: v.Encode()}).String())
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	drv := riversqlite.New(db)
	m, err := rivermigrate.New(drv, nil)
	if err != nil {
		return 0, 0, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return 0, 0, fmt.Errorf("river migrate: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, riverNoop{})
	c, err := river.NewClient(drv, &river.Config{
		FetchCooldown:     riverFetchCooldown,
		FetchPollInterval: riverFetchPollInterval,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverMaxWorkers}},
		Workers:           workers,
	})
	if err != nil {
		return 0, 0, err
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
			return 0, 0, fmt.Errorf("river fill: %w", err)
		}
		left -= k
	}
	if fillOnly {
		return time.Nanosecond, 0, nil
	}
	events, cancelSub := c.SubscribeConfig(&river.SubscribeConfig{ChanSize: n + 1000, Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed}})
	defer cancelSub()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	c0, w0 := cpuTime(), wchar()
	s0 := sysTime
	defer func() { lastWritten = float64(wchar()-w0) / float64(n) }()
	start := time.Now()
	if err := c.Start(runCtx); err != nil {
		return 0, 0, err
	}
	done, failed := 0, 0
	limit := time.After(10 * time.Minute)
	var d time.Duration
loop:
	for {
		select {
		case ev := <-events:
			if ev == nil {
				return 0, 0, errors.New("river: subscription closed")
			}
			if ev.Kind == river.EventKindJobFailed {
				failed++
			}
			if done++; done == n {
				d = time.Since(start)
				break loop
			}
		case <-limit:
			return 0, 0, fmt.Errorf("river worked %d of %d jobs", done, n)
		}
	}
	cpu := cpuTime() - c0
	sysSpan = sysTime - s0
	stopCtx, stopCancel := context.WithTimeout(context.Background(), time.Minute)
	defer stopCancel()
	_ = c.Stop(stopCtx)
	if failed > 0 {
		return 0, 0, fmt.Errorf("river: %d jobs failed", failed)
	}
	return d, cpu, nil
}
