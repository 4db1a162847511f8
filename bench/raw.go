package bench

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/sqlite"
)

// Raw driver targets, in messages got and deleted per second.
const (
	SQLiteGetDeleteTarget = 30_000
	MemoryGetDeleteTarget = 1_000_000
)

// memoryRound is the largest backlog a memory figure drains at once;
// larger counts are drained in rounds, refilled between them (not timed),
// as queue/memory's benchmark does.
const memoryRound = 100_000

// getDeleteLoop runs workers that Get(32) and DeleteBatch until the queue
// is empty (until done reaches target, pausing 1 ms on an empty get, if
// target > 0).
func getDeleteLoop(ctx context.Context, q *queue.Queue, workers int, target int64, done *atomic.Int64) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			rs := make([]queue.Receipt, 0, queue.MaxBatchSize)
			for target <= 0 || done.Load() < target {
				ms, err := q.Get(ctx, queue.MaxBatchSize, time.Minute)
				if err != nil {
					errs <- err
					return
				}
				if len(ms) == 0 {
					if target <= 0 {
						return
					}
					// A consumer backs off on an empty queue (the
					// listener from 100 ms); a short pause stands in.
					time.Sleep(time.Millisecond)
					continue
				}
				rs = rs[:0]
				for _, m := range ms {
					rs = append(rs, queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
				}
				res, err := q.DeleteBatch(ctx, rs)
				if err != nil {
					errs <- err
					return
				}
				for _, r := range res {
					if r != nil {
						errs <- r
						return
					}
				}
				done.Add(int64(len(ms)))
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

type rawCase struct {
	what   string
	target float64
	// run measures once and returns the messages and what the timed part
	// cost.
	run func(ctx context.Context) (int, usage, error)
}

func raw(ctx context.Context, e *Env, s *Section) error {
	ns, nm := e.Sizes.RawSQLite, e.Sizes.RawMemory
	s.how("The drivers alone, no listener. SQLite: `sqlite.Open` on a fresh file (WAL, synchronous NORMAL), %d-byte "+
		"messages, %s per figure. Memory: %d-byte messages, %s per figure, drained in rounds of at most %s (refilled between "+
		"rounds, not timed). **Get(32)+DeleteBatch** drains a backlog put before the run (not timed) with Get(32) followed by one "+
		"DeleteBatch of the 32, until the queue is empty. **Mixed** runs 4 producers and 4 consumers at once from an empty "+
		"queue, timed until every message put has been deleted (a consumer that finds the queue empty pauses 1 ms). Each "+
		"figure is the median of %d runs; the note gives the CPU time per message and how many cores this process and the "+
		"whole machine kept busy over the timed parts (getrusage, /proc/stat).", len(jsonBody), commas(int64(ns)), len(smallBody), commas(int64(nm)),
		commas(memoryRound), e.Sizes.Repeats)
	openSQLite := func() (*queue.Queue, func(), error) {
		dir, err := e.tempDir("raw")
		if err != nil {
			return nil, nil, err
		}
		db, err := sqlite.Open(filepath.Join(dir, "raw.db"))
		if err != nil {
			return nil, nil, err
		}
		q, err := db.Queue("raw")
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		return q, func() { db.Close() }, nil
	}
	openMemory := func() (*queue.Queue, func(), error) {
		q, err := memory.NewStore().Queue("raw")
		return q, func() {}, err
	}
	type opener func() (*queue.Queue, func(), error)
	put := func(open opener, n, producers int, body []byte) func(context.Context) (int, usage, error) {
		return func(ctx context.Context) (int, usage, error) {
			q, closeFn, err := open()
			if err != nil {
				return 0, usage{}, err
			}
			defer closeFn()
			u, err := span(func() error { return fillParallel(ctx, q, n, producers, body) })
			return n, u, err
		}
	}
	drain := func(open opener, n, consumers, round int, body []byte) func(context.Context) (int, usage, error) {
		return func(ctx context.Context) (int, usage, error) {
			q, closeFn, err := open()
			if err != nil {
				return 0, usage{}, err
			}
			defer closeFn()
			var total usage
			for left := n; left > 0; {
				k := min(left, round)
				if err := fillParallel(ctx, q, k, 8, body); err != nil {
					return 0, usage{}, err
				}
				var done atomic.Int64
				u, err := span(func() error { return getDeleteLoop(ctx, q, consumers, 0, &done) })
				if err != nil {
					return 0, usage{}, err
				}
				total.add(u)
				if done.Load() != int64(k) {
					return 0, usage{}, fmt.Errorf("drained %d of %d", done.Load(), k)
				}
				left -= k
			}
			return n, total, nil
		}
	}
	mixed := func(open opener, n int, body []byte) func(context.Context) (int, usage, error) {
		return func(ctx context.Context) (int, usage, error) {
			q, closeFn, err := open()
			if err != nil {
				return 0, usage{}, err
			}
			defer closeFn()
			var done atomic.Int64
			var perr, cerr error
			u, _ := span(func() error {
				var wg sync.WaitGroup
				wg.Go(func() { perr = fillParallel(ctx, q, n, 4, body) })
				wg.Go(func() { cerr = getDeleteLoop(ctx, q, 4, int64(n), &done) })
				wg.Wait()
				return nil
			})
			if perr != nil || cerr != nil {
				return 0, usage{}, fmt.Errorf("producers: %v, consumers: %v", perr, cerr)
			}
			return n, u, nil
		}
	}
	cases := []rawCase{
		{what: "SQLite: Put, 1 producer", run: put(openSQLite, ns/4, 1, jsonBody)},
		{what: "SQLite: Put, 4 producers (commits shared)", run: put(openSQLite, ns, 4, jsonBody)},
		{what: "SQLite: Get(32)+DeleteBatch, 1 consumer", target: SQLiteGetDeleteTarget, run: drain(openSQLite, ns, 1, ns, jsonBody)},
		{what: "SQLite: Get(32)+DeleteBatch, 4 consumers", run: drain(openSQLite, ns, 4, ns, jsonBody)},
		{what: "SQLite: mixed, 4 producers + 4 consumers", run: mixed(openSQLite, ns, jsonBody)},
		{what: "memory: Put, 1 producer", run: put(openMemory, min(nm, memoryRound), 1, smallBody)},
		{what: "memory: Get(32)+DeleteBatch, 1 consumer", target: MemoryGetDeleteTarget, run: drain(openMemory, nm, 1, memoryRound, smallBody)},
		{what: "memory: Get(32)+DeleteBatch, 4 consumers", run: drain(openMemory, nm, 4, memoryRound, smallBody)},
		{what: "memory: mixed, 4 producers + 4 consumers", run: mixed(openMemory, min(nm, memoryRound*5), smallBody)},
	}
	for _, c := range cases {
		rates := make([]float64, 0, e.Sizes.Repeats)
		var all usage
		msgs := 0
		for r := 0; r < e.Sizes.Repeats; r++ {
			n, u, err := c.run(ctx)
			if err != nil {
				return fmt.Errorf("%s: %w", c.what, err)
			}
			rates = append(rates, rate(n, u.wall))
			all.add(u)
			msgs += n
		}
		m := median(rates)
		e.logf("raw: %s: %s", c.what, perSec(m))
		row := Row{What: c.what, Figure: perSec(m), Note: all.describe(msgs)}
		if c.target > 0 {
			row.Target = "≥ " + perSec(c.target)
			row.Holds = verdict(m >= c.target)
			if m < c.target {
				row.Note = missedForCPU(all, msgs, c.target) + "; " + row.Note
			}
		}
		s.add(row)
	}
	s.note("SQLite Put with 1 producer pays one commit per message; with 4 producers, Puts that arrive while one is being " +
		"written share the next commit (group commit), and each still returns only once its message is committed.")
	return nil
}

// missedForCPU explains a missed rate target from the CPU figures: what one
// core does at the measured CPU cost, and what the process got.
func missedForCPU(u usage, msgs int, target float64) string {
	perMsg := u.cpu / time.Duration(max(msgs, 1))
	perCore := 1 / perMsg.Seconds()
	s := fmt.Sprintf("missed: at %s of CPU per message a core does %s", usString(perMsg), perSec(perCore))
	m := u.machineCores()
	switch {
	case !math.IsNaN(m) && m-u.cores() >= 0.5:
		s += fmt.Sprintf(", but this process got %.2f cores while other processes kept %.2f busy", u.cores(), m-u.cores())
	case perCore < target:
		s += ", below the target: the cost per message is the reason"
	}
	return s
}
