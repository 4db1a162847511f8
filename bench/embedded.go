package bench

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maragudk/goqite"
	"github.com/maragudk/goqite/jobs"
	_ "modernc.org/sqlite" // the driver both sides use

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/sqlite"
)

// EmbeddedTarget: adaptq's SQLite driver through the listener drains at
// least this many times as fast as goqite's receive/delete loop.
const EmbeddedTarget = 3.0

// goqite's jobs runner settings. The runner receives at most one message
// per PollInterval (ReceiveAndWait waits one tick before each receive), so
// its default of 100 ms would cap it at 10 messages a second: the harness
// calibrates the interval instead, running the runner briefly at each of
// goqiteJobsPollIntervals and keeping the fastest. Limit matches the
// listener's handler concurrency for one task.
var goqiteJobsPollIntervals = []time.Duration{time.Millisecond, 100 * time.Microsecond, 10 * time.Microsecond, time.Microsecond}

const (
	goqiteJobsLimit = listenerSlotsPerTask
	// goqiteTimeout is goqite's visibility timeout, set to adaptq's
	// default so neither side redelivers during a run.
	goqiteTimeout = queue.DefaultVisibilityTimeout
)

// goqiteDSN opens path with the pragmas adaptq's driver uses
// (queue/sqlite/db.go: WAL, synchronous NORMAL, a 5 s busy timeout, BEGIN
// IMMEDIATE, temp_store MEMORY) on the same modernc.org/sqlite driver.
func goqiteDSN(path string) string {
	q := url.Values{}
	q.Set("_busy_timeout", "5000")
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "NORMAL")
	q.Set("_txlock", "immediate")
	q.Add("_pragma", "temp_store(MEMORY)")
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(path), RawQuery: q.Encode()}).String()
}

// openGoqite opens a fresh goqite database as its README sets one up: one
// connection (SQLite has one writer), the schema from goqite.Setup.
func openGoqite(ctx context.Context, path string) (*sql.DB, *goqite.Queue, error) {
	db, err := sql.Open("sqlite", goqiteDSN(path))
	if err != nil {
		return nil, nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	if err := goqite.Setup(ctx, db); err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("goqite setup: %w", err)
	}
	q := goqite.New(goqite.NewOpts{DB: db, Name: "bench", Timeout: goqiteTimeout})
	return db, q, nil
}

// goqiteFill sends n messages in transactions of 1,000 (not timed).
func goqiteFill(ctx context.Context, db *sql.DB, q *goqite.Queue, n int, body func() []byte) error {
	for n > 0 {
		k := min(n, 1000)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		for i := 0; i < k; i++ {
			if err := q.SendTx(ctx, tx, goqite.Message{Body: body()}); err != nil {
				_ = tx.Rollback()
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

func goqiteCount(ctx context.Context, db *sql.DB) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, `select count(*) from goqite`).Scan(&n)
	return n, err
}

// runGoqiteLoop drains n messages with goqite's Receive/Delete from
// workers goroutines.
func runGoqiteLoop(ctx context.Context, dir string, n, workers int) (float64, error) {
	db, q, err := openGoqite(ctx, filepath.Join(dir, "goqite.db"))
	if err != nil {
		return 0, err
	}
	defer db.Close()
	if err := goqiteFill(ctx, db, q, n, func() []byte { return jsonBody }); err != nil {
		return 0, err
	}
	var done atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for {
				m, err := q.Receive(ctx)
				if err != nil {
					errs <- err
					return
				}
				if m == nil {
					return
				}
				_ = noop(ctx, nil)
				if err := q.Delete(ctx, m.ID); err != nil {
					errs <- err
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	if left, err := goqiteCount(ctx, db); err != nil || left != 0 || done.Load() != int64(n) {
		return 0, fmt.Errorf("goqite loop: deleted %d of %d, %d left (%v)", done.Load(), n, left, err)
	}
	return rate(n, d), nil
}

// runGoqiteJobs drains n jobs with goqite's jobs runner.
func runGoqiteJobs(ctx context.Context, dir string, n int, poll time.Duration) (float64, error) {
	db, q, err := openGoqite(ctx, filepath.Join(dir, "goqite-jobs.db"))
	if err != nil {
		return 0, err
	}
	defer db.Close()
	for i := 0; i < n; i++ {
		if err := jobs.Create(ctx, q, "noop", jsonBody); err != nil {
			return 0, err
		}
	}
	r := jobs.NewRunner(jobs.NewRunnerOpts{Limit: goqiteJobsLimit, PollInterval: poll, Queue: q})
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var ran atomic.Int64
	r.Register("noop", func(context.Context, []byte) error {
		if ran.Add(1) == int64(n) {
			cancel() // Start returns once every running job is done and deleted
		}
		return nil
	})
	watchdog := time.AfterFunc(10*time.Minute, cancel)
	defer watchdog.Stop()
	start := time.Now()
	r.Start(runCtx)
	d := time.Since(start)
	if left, err := goqiteCount(ctx, db); err != nil || left != 0 || ran.Load() != int64(n) {
		return 0, fmt.Errorf("goqite jobs: ran %d of %d, %d left (%v)", ran.Load(), n, left, err)
	}
	return rate(n, d), nil
}

// runSQLiteListener drains n messages from adaptq's SQLite driver with the
// listener.
func runSQLiteListener(ctx context.Context, dir string, n, tasks int) (float64, error) {
	db, err := sqlite.Open(filepath.Join(dir, "adaptq.db"))
	if err != nil {
		return 0, err
	}
	defer db.Close()
	q, err := db.Queue("bench")
	if err != nil {
		return 0, err
	}
	if err := fillParallel(ctx, q, n, 8, jsonBody); err != nil {
		return 0, err
	}
	d, _, err := drainListener(ctx, q, n, noop, listener.Options{Tasks: tasks, Concurrency: tasks * listenerSlotsPerTask}, 10*time.Minute)
	if err != nil {
		return 0, err
	}
	if left, err := q.Count(ctx); err != nil || left != 0 {
		return 0, fmt.Errorf("adaptq listener: %d left (%v)", left, err)
	}
	return rate(n, d), nil
}

// calibrateGoqiteJobs runs the jobs runner on m jobs at each candidate
// poll interval and returns the fastest, with a description of all.
func calibrateGoqiteJobs(ctx context.Context, e *Env, m int) (time.Duration, string, error) {
	var best time.Duration
	var bestRate float64
	var parts []string
	for _, p := range goqiteJobsPollIntervals {
		dir, err := e.tempDir("goqite-cal")
		if err != nil {
			return 0, "", err
		}
		r, err := runGoqiteJobs(ctx, dir, m, p)
		if err != nil {
			return 0, "", err
		}
		e.logf("embedded: goqite jobs runner calibration: PollInterval %s: %s", p, perSec(r))
		parts = append(parts, fmt.Sprintf("%s → %s", p, perSec(r)))
		if r > bestRate {
			best, bestRate = p, r
		}
	}
	return best, strings.Join(parts, ", "), nil
}

func embedded(ctx context.Context, e *Env, s *Section) error {
	n := e.Sizes.Embedded
	s.how("Both sides on the same driver (modernc.org/sqlite, pure Go) with the same pragmas (WAL, synchronous NORMAL, "+
		"busy timeout 5 s, BEGIN IMMEDIATE), each on a fresh database file, each draining the same %s messages of %d bytes "+
		"put before the run (not timed), with a no-op handler. adaptq: the SQLite driver (`sqlite.Open`) through the listener, "+
		"%d handler slots per task, timed from Start to the last delete. goqite v0.2.0, set up as its README does (one "+
		"connection, `goqite.Setup`): its **loop** is Receive (one message, one transaction) → handler → Delete (one "+
		"transaction) on each consumer goroutine until Receive returns nil; its **jobs runner** is `jobs.NewRunner` with Limit "+
		"%d (the listener's handler concurrency for one task) and the PollInterval that ran fastest in a calibration (below; "+
		"its default, 100 ms, would cap it at 10 messages a second, as ReceiveAndWait waits one interval before each receive), "+
		"timed from Start until it returns after the last job was deleted. Each figure is the median of %d runs (goqite and "+
		"adaptq alternate); each run checks that the queue is empty after it.",
		commas(int64(n)), len(jsonBody), listenerSlotsPerTask, goqiteJobsLimit, e.Sizes.Repeats)
	poll, cal, err := calibrateGoqiteJobs(ctx, e, max(n/20, 50))
	if err != nil {
		return fmt.Errorf("goqite jobs runner calibration: %w", err)
	}
	s.how("goqite jobs runner calibration (%s jobs each): %s; PollInterval %s is used.", commas(int64(max(n/20, 50))), cal, poll)
	type series struct {
		what  string
		run   func(dir string) (float64, error)
		rates []float64
	}
	all := []*series{
		{what: "goqite loop, 1 consumer", run: func(dir string) (float64, error) { return runGoqiteLoop(ctx, dir, n, 1) }},
		{what: "adaptq listener, 1 task", run: func(dir string) (float64, error) { return runSQLiteListener(ctx, dir, n, 1) }},
		{what: "goqite loop, 4 consumers", run: func(dir string) (float64, error) { return runGoqiteLoop(ctx, dir, n, 4) }},
		{what: "adaptq listener, 4 tasks", run: func(dir string) (float64, error) { return runSQLiteListener(ctx, dir, n, 4) }},
		{what: fmt.Sprintf("goqite jobs runner, Limit %d, PollInterval %s", goqiteJobsLimit, poll), run: func(dir string) (float64, error) { return runGoqiteJobs(ctx, dir, n, poll) }},
		{what: "goqite batched (ReceiveTx/DeleteTx, 32 per transaction), 1 consumer", run: func(dir string) (float64, error) {
			st, err := runGoqiteBatched(ctx, dir, n, jsonBody)
			return st.rate, err
		}},
	}
	for r := 0; r < e.Sizes.Repeats; r++ {
		order := all
		if r%2 == 1 { // alternate which side runs first
			order = []*series{all[5], all[1], all[0], all[3], all[2], all[4]}
		}
		for _, sr := range order {
			dir, err := e.tempDir("embedded")
			if err != nil {
				return err
			}
			x, err := sr.run(dir)
			if err != nil {
				return fmt.Errorf("%s: %w", sr.what, err)
			}
			sr.rates = append(sr.rates, x)
			e.logf("embedded: %s: %s", sr.what, perSec(x))
		}
	}
	med := make([]float64, len(all))
	for i, sr := range all {
		med[i] = median(sr.rates)
		row := Row{What: sr.what, Figure: perSec(med[i])}
		switch i {
		case 0, 2:
			row.Note = "Receive + Delete: 2 write transactions per message"
		case 1, 3:
			row.Note = "Get(32) + DeleteBatch: 2 write transactions per 32 messages"
		case 4:
			row.Note = "Receive + Extend + Delete: 3 write transactions per message, at most one receive per poll interval"
		case 5:
			row.Note = "32 ReceiveTx in one transaction + 32 DeleteTx in another: 2 write transactions per 32 messages, as the listener; 64 statements"
		}
		s.add(row)
	}
	for _, c := range []struct {
		what     string
		a, b     int
		target   bool
		whyAbove string
	}{
		{"adaptq listener (1 task) ÷ goqite loop (1 consumer)", 1, 0, true, ""},
		{"adaptq listener (4 tasks) ÷ goqite loop (4 consumers)", 3, 2, true, ""},
		{"adaptq listener (1 task) ÷ goqite jobs runner", 1, 4, false, ""},
		{"adaptq listener (1 task) ÷ goqite batched (1 consumer)", 1, 5, false, ""},
	} {
		ratio := med[c.a] / med[c.b]
		row := Row{What: c.what, Figure: fmt.Sprintf("%.1f×", ratio)}
		if c.target {
			row.Target = fmt.Sprintf("≥ %.0f×", EmbeddedTarget)
			row.Holds = verdict(ratio >= EmbeddedTarget)
		} else if c.b == 4 {
			row.Note = "no target: the runner is goqite's convenience layer, shown for completeness"
		} else {
			row.Note = "the fair peer: goqite batched as its API allows; the target (≥ 6×) is held at 200-byte bodies, below"
		}
		s.add(row)
	}
	s.note("Why: per message, goqite's loop commits two write transactions (the receive's UPDATE … RETURNING of one row and "+
		"the delete) and its jobs runner three (an Extend as each job starts), while adaptq's listener commits two per 32 "+
		"messages (one UPDATE … RETURNING of a batch, one DELETE of the batch). SQLite has one writer, so more consumers "+
		"change little on either side: 1 → 4 consumers took goqite's loop from %s to %s and the listener from %s to %s.", perSec(med[0]), perSec(med[2]), perSec(med[1]), perSec(med[3]))
	return embeddedSizes(ctx, e, s)
}
