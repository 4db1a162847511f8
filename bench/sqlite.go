package bench

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maragudk/goqite"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/sqlite"
)

// Targets of issue 13 for the SQLite driver.
const (
	// GoqiteBatchedTarget: at 200-byte bodies the listener on adaptq's
	// SQLite driver drains at least this many times as fast as goqite
	// batched 32 per transaction with its own ReceiveTx/DeleteTx.
	GoqiteBatchedTarget = 6.0
	// LargeDrainTarget is the drain rate of 64 KiB messages, in messages a
	// second, and LargeWriteTarget the bytes written per message drained,
	// as a multiple of the body.
	LargeDrainTarget = 8_000
	LargeWriteTarget = 1.2
	// CountTarget bounds Count at the largest backlog.
	CountTarget = time.Millisecond
	// ShrinkTarget: within a minute of a drain the file (with its WAL) is
	// back under this fraction of its peak.
	ShrinkTarget = 0.10
	// TwoProcessTarget: two processes draining one file do at least this
	// fraction of what one does.
	TwoProcessTarget = 0.95
)

// bodySizes are the body sizes of the embedded section's size rows.
var bodySizes = []int{200, 4 << 10, 64 << 10}

// bodyOf returns a body of n bytes (JSON-ish text, so neither side gets a
// compressible-zero advantage it would not get in use).
func bodyOf(n int) []byte {
	b := make([]byte, n)
	const pat = `{"order":12345,"customer":"c-0001","note":"benchmark message body"}`
	for i := range b {
		b[i] = pat[i%len(pat)]
	}
	return b
}

func sizeLabel(n int) string {
	switch {
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	default:
		return fmt.Sprintf("%d B", n)
	}
}

// bytesWritten is what this process has passed to write calls (Linux
// /proc/self/io wchar): SQLite's WAL frames and its checkpoints' copies
// into the database file. ok is false where it cannot be read.
func bytesWritten() (int64, bool) {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "wchar:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// drainStat is one drain of a sized run.
type drainStat struct {
	rate     float64
	written  float64 // bytes written per message drained; NaN if unknown
	duration time.Duration
	use      usage // the drain's wall and CPU time
}

// measureWrites runs f and returns the bytes this process wrote meanwhile
// per message, NaN if unknown.
func measureWrites(n int, f func() error) (float64, error) {
	w0, ok0 := bytesWritten()
	err := f()
	w1, ok1 := bytesWritten()
	if !ok0 || !ok1 {
		return math.NaN(), err
	}
	return float64(w1-w0) / float64(max(n, 1)), err
}

// runGoqiteBatched drains n messages with goqite's own transaction API, as
// a user who batches would: one transaction of up to 32 ReceiveTx, the
// handler on each, one transaction of their DeleteTx, until a receive
// transaction gets nothing.
func runGoqiteBatched(ctx context.Context, dir string, n int, body []byte) (drainStat, error) {
	db, q, err := openGoqite(ctx, filepath.Join(dir, "goqite-batched.db"))
	if err != nil {
		return drainStat{}, err
	}
	defer db.Close()
	if err := goqiteFill(ctx, db, q, n, func() []byte { return body }); err != nil {
		return drainStat{}, err
	}
	done := 0
	var d time.Duration
	var use usage
	written, err := measureWrites(n, func() (err error) {
		start := time.Now()
		use, err = span(func() error { return goqiteBatchedDrain(ctx, db, q, &done) })
		d = time.Since(start)
		return err
	})
	if err != nil {
		return drainStat{}, err
	}
	if left, err := goqiteCount(ctx, db); err != nil || left != 0 || done != n {
		return drainStat{}, fmt.Errorf("goqite batched: deleted %d of %d, %d left (%v)", done, n, left, err)
	}
	return drainStat{rate: rate(n, d), written: written, duration: d, use: use}, nil
}

// goqiteBatchedDrain is runGoqiteBatched's timed loop.
func goqiteBatchedDrain(ctx context.Context, db *sql.DB, q *goqite.Queue, done *int) error {
	ms := make([]*goqite.Message, 0, queue.MaxBatchSize)
	for {
		ms = ms[:0]
		if err := inTx(ctx, db, func(tx *sql.Tx) error {
			for len(ms) < queue.MaxBatchSize {
				m, err := q.ReceiveTx(ctx, tx)
				if err != nil || m == nil {
					return err
				}
				ms = append(ms, m)
			}
			return nil
		}); err != nil {
			return err
		}
		if len(ms) == 0 {
			return nil
		}
		for range ms {
			_ = noop(ctx, nil)
		}
		if err := inTx(ctx, db, func(tx *sql.Tx) error {
			for _, m := range ms {
				if err := q.DeleteTx(ctx, tx, m.ID); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
		*done += len(ms)
	}
}

func inTx(ctx context.Context, db *sql.DB, f func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// runSQLiteListenerSized drains n messages of body from adaptq's SQLite
// driver with the listener and measures the bytes written meanwhile.
func runSQLiteListenerSized(ctx context.Context, dir string, n, tasks int, body []byte) (drainStat, error) {
	db, err := sqlite.Open(filepath.Join(dir, "adaptq.db"))
	if err != nil {
		return drainStat{}, err
	}
	defer db.Close()
	q, err := db.Queue("bench")
	if err != nil {
		return drainStat{}, err
	}
	if err := fillParallel(ctx, q, n, 8, body); err != nil {
		return drainStat{}, err
	}
	var d time.Duration
	var use usage
	written, err := measureWrites(n, func() (err error) {
		use, err = span(func() (err error) {
			d, _, err = drainListener(ctx, q, n, noop, sizedListenerOptions(tasks), 10*time.Minute)
			return err
		})
		return err
	})
	if err != nil {
		return drainStat{}, err
	}
	if left, err := q.Count(ctx); err != nil || left != 0 {
		return drainStat{}, fmt.Errorf("adaptq listener: %d left (%v)", left, err)
	}
	return drainStat{rate: rate(n, d), written: written, duration: d, use: use}, nil
}

// sizedListenerOptions are the listener's options in the sized runs: its
// defaults, as a user who sets nothing runs it (issue 34: the figures of a
// bench's own settings are not what a user gets), with tasks tasks.
func sizedListenerOptions(tasks int) listener.Options {
	return listener.Options{Tasks: tasks}
}

// sizedCount is the number of messages of a size run: Embedded, fewer for
// large bodies so that a run writes at most EmbeddedBytes.
func sizedCount(sz Sizes, body int) int {
	return max(min(sz.Embedded, sz.EmbeddedBytes/body), 1)
}

func bytesLabel(b float64) string {
	switch {
	case math.IsNaN(b):
		return "unknown"
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", b)
	}
}

// embeddedSizes adds the embedded section's rows by body size: goqite
// batched beside the listener on adaptq's driver, 1 consumer each, and at
// 200 bytes River on SQLite too.
func embeddedSizes(ctx context.Context, e *Env, s *Section) error {
	repeats := max(min(e.Sizes.Repeats, 3), 1)
	var counts []string
	for _, size := range bodySizes {
		counts = append(counts, fmt.Sprintf("%s at %s", commas(int64(sizedCount(e.Sizes, size))), sizeLabel(size)))
	}
	s.how("**By body size** (rows marked 200 B, 4 KiB, 64 KiB): the same two sides with bodies of that size, 1 consumer each: "+
		"adaptq's listener with its default options (`listener.Options{}`: 1 task, concurrency 64), and **goqite batched**, goqite's loop as a user who batches writes it with goqite's own "+
		"transaction API (one transaction of up to 32 `ReceiveTx`, the handler on each, one transaction of their `DeleteTx`). "+
		"At 200 B also **River on SQLite** (riverdriver/riversqlite, the version of river, on the same pragmas) with its best public settings: one connection, as its driver's doc asks for SQLite, MaxWorkers 100, FetchCooldown 1 ms, the fill with InsertMany (not timed), timed from Start to the last JobCompleted event. "+
		"Messages per run: %s (at most %s of bodies per run). Each figure is the median of %d runs, the sides alternating. "+
		"**Written per message** is the bytes the process passed to write calls while it drained (Linux /proc/self/io wchar: "+
		"WAL frames and the checkpoints' copies into the database file), divided by the messages drained.",
		strings.Join(counts, ", "), bytesLabel(float64(e.Sizes.EmbeddedBytes)), repeats)
	for _, size := range bodySizes {
		n := sizedCount(e.Sizes, size)
		body := bodyOf(size)
		var gq, aq, rq []drainStat
		for r := 0; r < repeats; r++ {
			runs := []func() error{
				func() error {
					dir, err := e.tempDir("goqite-sized")
					if err != nil {
						return err
					}
					st, err := runGoqiteBatched(ctx, dir, n, body)
					gq = append(gq, st)
					os.RemoveAll(dir)
					return err
				},
				func() error {
					dir, err := e.tempDir("adaptq-sized")
					if err != nil {
						return err
					}
					st, err := runSQLiteListenerSized(ctx, dir, n, 1, body)
					aq = append(aq, st)
					os.RemoveAll(dir)
					return err
				},
			}
			if r%2 == 1 {
				runs[0], runs[1] = runs[1], runs[0]
			}
			if size == 200 { // River on SQLite, the other peer, at the size of its goal
				runs = append(runs, func() error {
					dir, err := e.tempDir("river-sized")
					if err != nil {
						return err
					}
					st, err := runRiverSQLite(ctx, filepath.Join(dir, "river.db"), n, body)
					rq = append(rq, st)
					os.RemoveAll(dir)
					return err
				})
			}
			for _, run := range runs {
				if err := run(); err != nil {
					return fmt.Errorf("%s bodies: %w", sizeLabel(size), err)
				}
			}
			e.logf("embedded: %s: goqite batched %s, adaptq listener %s", sizeLabel(size), perSec(gq[len(gq)-1].rate), perSec(aq[len(aq)-1].rate))
		}
		gRate, aRate := medianOf(gq, func(d drainStat) float64 { return d.rate }), medianOf(aq, func(d drainStat) float64 { return d.rate })
		gW, aW := medianOf(gq, func(d drainStat) float64 { return d.written }), medianOf(aq, func(d drainStat) float64 { return d.written })
		var gU, aU usage
		for i := range gq {
			gU.add(gq[i].use)
			aU.add(aq[i].use)
		}
		gCPU, aCPU := gU.cpu/time.Duration(n*len(gq)), aU.cpu/time.Duration(n*len(aq))
		label := sizeLabel(size)
		s.add(Row{What: fmt.Sprintf("%s: goqite batched (ReceiveTx/DeleteTx, 32 per transaction), 1 consumer", label), Figure: perSec(gRate),
			Note: fmt.Sprintf("written per message: %s (%.2f× the body); %s", bytesLabel(gW), gW/float64(size), gU.describe(n*len(gq)))})
		row := Row{What: fmt.Sprintf("%s: adaptq listener, 1 task", label), Figure: perSec(aRate),
			Note: fmt.Sprintf("written per message: %s (%.2f× the body); %s", bytesLabel(aW), aW/float64(size), aU.describe(n*len(aq)))}
		if size == 64<<10 {
			row.Target = "≥ " + perSec(LargeDrainTarget)
			row.Holds = verdict(aRate >= LargeDrainTarget)
			if aRate < LargeDrainTarget {
				row.Note = missedForCPU(aU, n*len(aq), LargeDrainTarget) + "; " + row.Note
			}
		}
		s.add(row)
		ratio := Row{What: fmt.Sprintf("%s: adaptq listener ÷ goqite batched", label), Figure: fmt.Sprintf("%.1f×", aRate/gRate),
			Note: fmt.Sprintf("CPU per message: goqite batched %s, adaptq %s (%.1f×)", usString(gCPU), usString(aCPU), gCPU.Seconds()/aCPU.Seconds())}
		if size == 200 {
			ratio.Target = fmt.Sprintf("≥ %.0f×", GoqiteBatchedTarget)
			ratio.Holds = verdict(aRate/gRate >= GoqiteBatchedTarget)
			if aRate/gRate < GoqiteBatchedTarget {
				ratio.Note = fmt.Sprintf("missed: goqite batched costs %s of CPU per message and adaptq through the listener %s, %.1f× less; "+
					"the listener's dispatch is part of adaptq's figure (the raw section's Get(32)+DeleteBatch rows give the driver alone)",
					usString(gCPU), usString(aCPU), gCPU.Seconds()/aCPU.Seconds())
			}
		}
		s.add(ratio)
		if len(rq) > 0 {
			rRate := medianOf(rq, func(d drainStat) float64 { return d.rate })
			var rU usage
			for i := range rq {
				rU.add(rq[i].use)
			}
			rCPU := rU.cpu / time.Duration(n*len(rq))
			s.add(Row{What: fmt.Sprintf("%s: River %s on SQLite (riversqlite, one connection, MaxWorkers %d, FetchCooldown %s)", label, riverVersion, riverSQLiteWorkers, riverSQLiteCooldown),
				Figure: perSec(rRate), Note: fmt.Sprintf("written per message: %s; %s", bytesLabel(medianOf(rq, func(d drainStat) float64 { return d.written })), rU.describe(n*len(rq)))})
			s.add(Row{What: fmt.Sprintf("%s: adaptq listener ÷ River on SQLite", label), Figure: fmt.Sprintf("%.1f×", aRate/rRate),
				Target: fmt.Sprintf("≥ %.0f×", SQLiteRiverTarget), Holds: verdict(aRate/rRate >= SQLiteRiverTarget),
				Note: fmt.Sprintf("CPU per message: River %s, adaptq %s (%.1f×)", usString(rCPU), usString(aCPU), rCPU.Seconds()/aCPU.Seconds())})
		}
		if size == 64<<10 {
			s.add(Row{What: "64 KiB: adaptq bytes written per message drained, ÷ the body", Figure: fmt.Sprintf("%.2f× (%s)", aW/float64(size), bytesLabel(aW)),
				Target: fmt.Sprintf("≤ %.1f×", LargeWriteTarget), Holds: verdict(aW/float64(size) <= LargeWriteTarget),
				Note: "a get rewrites the message's small state row, not its body; a delete frees the body's pages without writing them"})
		}
	}
	return nil
}

func medianOf[T any](xs []T, f func(T) float64) float64 {
	v := make([]float64, 0, len(xs))
	for _, x := range xs {
		v = append(v, f(x))
	}
	return median(v)
}

// fileSize is the size of the database file and its WAL.
func fileSize(path string) int64 {
	var n int64
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// backlogResult is one backlog of the sqlite section.
type backlogResult struct {
	n                   int
	drain               float64
	countMed, countMax  time.Duration
	peak, afterDrain    int64
	later               int64         // after e.Sizes.SQLiteAfter
	under10             time.Duration // when it first was under ShrinkTarget of the peak; < 0 never
	drainUsage          usage
	fillRate            float64
	countCalls          int
	watchErr            error
	watchDone           chan struct{}
	path                string
	closeDB             func()
	drainEnd            time.Time
	laterAt             time.Duration
	vacuumedDuringDrain bool
}

// sqliteSection measures adaptq's SQLite driver alone: backlogs (drain
// rate, Count, file size after the drain and later) and two processes on
// one file against one.
func sqliteSection(ctx context.Context, e *Env, s *Section) error {
	if err := sqliteBacklogs(ctx, e, s); err != nil {
		return err
	}
	return sqliteTwoProcesses(ctx, e, s)
}

func sqliteBacklogs(ctx context.Context, e *Env, s *Section) error {
	body := bodyOf(200)
	var ns []string
	for _, n := range e.Sizes.SQLiteBacklogs {
		ns = append(ns, commas(int64(n)))
	}
	s.how("**Backlogs** (%s messages of 200 bytes): each on a fresh file (`sqlite.Open`, the defaults), put by 8 producers (not timed); "+
		"then `Count` called %d times at the full backlog (median and largest); then drained by one consumer with Get(32) and "+
		"DeleteBatch until the queue is empty (timed). File size is the database file plus its WAL: at the peak (after the puts), "+
		"just after the drain, and %s after it, the DB left open and idle meanwhile (its vacuum loop running; the next backlog's "+
		"run goes on beside it). The target is the file under %.0f%% of its peak within a minute.",
		strings.Join(ns, ", "), countCalls, e.Sizes.SQLiteAfter, ShrinkTarget*100)
	var results []*backlogResult
	defer func() {
		for _, r := range results {
			if r.closeDB != nil {
				<-r.watchDone
				r.closeDB()
			}
		}
	}()
	for _, n := range e.Sizes.SQLiteBacklogs {
		r, err := runBacklog(ctx, e, n, body)
		if err != nil {
			return fmt.Errorf("backlog %s: %w", commas(int64(n)), err)
		}
		results = append(results, r)
		e.logf("sqlite: backlog %s: drain %s, Count median %s, file %s → %s", commas(int64(n)), perSec(r.drain), usString(r.countMed),
			bytesLabel(float64(r.peak)), bytesLabel(float64(r.afterDrain)))
	}
	for i, r := range results {
		<-r.watchDone
		r.closeDB()
		r.closeDB = nil
		if r.watchErr != nil {
			return r.watchErr
		}
		label := commas(int64(r.n))
		s.add(Row{What: fmt.Sprintf("backlog %s: drain, Get(32)+DeleteBatch, 1 consumer", label), Figure: perSec(r.drain),
			Note: fmt.Sprintf("puts at %s (8 producers); %s", perSec(r.fillRate), r.drainUsage.describe(r.n))})
		crow := Row{What: fmt.Sprintf("backlog %s: Count", label), Figure: fmt.Sprintf("%s median, %s largest of %d", usString(r.countMed), usString(r.countMax), r.countCalls)}
		if i == len(results)-1 {
			crow.Target = "≤ " + ms(CountTarget)
			crow.Holds = verdict(r.countMed <= CountTarget)
			crow.Note = "the depth is kept in the queue's row by the statements that change it; Count subtracts the expired messages not yet purged (an index probe)"
		}
		s.add(crow)
		frac := float64(r.later) / float64(r.peak)
		note := fmt.Sprintf("%.1f%% of the peak", frac*100)
		if r.under10 >= 0 {
			note += fmt.Sprintf("; under %.0f%% %s after the drain", ShrinkTarget*100, r.under10.Round(100*time.Millisecond))
		}
		if r.vacuumedDuringDrain {
			note += "; the vacuum loop began giving pages back before the drain ended (nine tenths of the file were free)"
		}
		s.add(Row{What: fmt.Sprintf("backlog %s: file at the peak → after the drain → %s later", label, r.laterAt.Round(time.Second)),
			Figure: fmt.Sprintf("%s → %s → %s", bytesLabel(float64(r.peak)), bytesLabel(float64(r.afterDrain)), bytesLabel(float64(r.later))),
			Target: fmt.Sprintf("< %.0f%% of the peak", ShrinkTarget*100), Holds: verdict(frac < ShrinkTarget), Note: note})
	}
	s.note("Space: the file is in incremental auto-vacuum mode; a DB's vacuum loop looks at the free list every second and gives pages " +
		"back in steps of 8 MiB (each its own short write transaction, up to 8 a second), then checkpoints and truncates the WAL, once " +
		"at least 256 KiB and nine tenths of the file are free, or half of it while nothing is being written (moving the live tail of " +
		"a queue being drained would be wasted writing). Before this, a drained file kept every page (auto_vacuum 0, no vacuum).")
	return nil
}

// countCalls is how many times Count is timed at each backlog.
const countCalls = 50

func runBacklog(ctx context.Context, e *Env, n int, body []byte) (*backlogResult, error) {
	dir, err := e.tempDir("backlog")
	if err != nil {
		return nil, err
	}
	r := &backlogResult{n: n, path: filepath.Join(dir, "backlog.db"), watchDone: make(chan struct{}), under10: -1}
	db, err := sqlite.Open(r.path)
	if err != nil {
		return nil, err
	}
	r.closeDB = func() { db.Close(); os.RemoveAll(dir) }
	fail := func(err error) (*backlogResult, error) {
		close(r.watchDone)
		r.closeDB()
		r.closeDB = nil
		return nil, err
	}
	q, err := db.Queue("backlog")
	if err != nil {
		return fail(err)
	}
	t0 := time.Now()
	if err := fillParallel(ctx, q, n, 8, body); err != nil {
		return fail(err)
	}
	r.fillRate = rate(n, time.Since(t0))
	r.peak = fileSize(r.path)
	var ds []time.Duration
	for range countCalls {
		t := time.Now()
		c, err := q.Count(ctx)
		ds = append(ds, time.Since(t))
		if err != nil || c != n {
			return fail(fmt.Errorf("Count = %d, %v; want %d", c, err, n))
		}
	}
	r.countMed, r.countMax, r.countCalls = medianDuration(ds), maxDuration(ds), len(ds)
	var done atomic.Int64
	// The peak may grow while the drain runs (the WAL): track the largest.
	stopPeak := make(chan struct{})
	var peakWG sync.WaitGroup
	peakWG.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopPeak:
				return
			case <-t.C:
				sz := fileSize(r.path)
				if sz > r.peak {
					r.peak = sz
				}
				if sz < r.peak*3/4 {
					r.vacuumedDuringDrain = true
				}
			}
		}
	})
	u, err := span(func() error { return getDeleteLoop(ctx, q, 1, 0, &done) })
	close(stopPeak)
	peakWG.Wait()
	if err != nil {
		return fail(err)
	}
	if done.Load() != int64(n) {
		return fail(fmt.Errorf("drained %d of %d", done.Load(), n))
	}
	r.drainUsage, r.drain = u, rate(n, u.wall)
	r.drainEnd = time.Now()
	r.afterDrain = fileSize(r.path)
	go func() {
		defer close(r.watchDone)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		deadline := r.drainEnd.Add(e.Sizes.SQLiteAfter)
		for {
			select {
			case <-ctx.Done():
				r.watchErr = ctx.Err()
				return
			case now := <-t.C:
				sz := fileSize(r.path)
				if r.under10 < 0 && float64(sz) < ShrinkTarget*float64(r.peak) {
					r.under10 = now.Sub(r.drainEnd)
				}
				if !now.Before(deadline) {
					r.later, r.laterAt = sz, now.Sub(r.drainEnd)
					return
				}
			}
		}
	}()
	return r, nil
}

// twoProcRun is one run of the two-process comparison.
type twoProcRun struct {
	rate     float64
	children []childResult
}

func sqliteTwoProcesses(ctx context.Context, e *Env, s *Section) error {
	n := e.Sizes.SQLiteTwoProc
	body := bodyOf(200)
	s.how("**Two processes on one file**: %s messages of 200 bytes put on a fresh file (not timed, the file then closed), then "+
		"drained by child processes (this program again) that each open the file with `sqlite.Open` and run consumers of "+
		"Get(32) and DeleteBatch until a get finds the queue empty: one process with 1 consumer, one process with 2 consumers, "+
		"and two processes with 1 consumer each, at once. The rate is the messages over the time from the first child's first "+
		"get to the last child's last delete. Median of %d runs, the three alternating. Each child reports the time its calls "+
		"took and how many took 1 ms or more (SQLite's busy handler sleeps at least 1 ms when it finds the write lock taken).",
		commas(int64(n)), max(min(e.Sizes.Repeats, 3), 1))
	type mode struct {
		what      string
		procs     int
		consumers int
		runs      []twoProcRun
	}
	modes := []*mode{
		{what: "one process, 1 consumer", procs: 1, consumers: 1},
		{what: "one process, 2 consumers", procs: 1, consumers: 2},
		{what: "two processes, 1 consumer each", procs: 2, consumers: 1},
	}
	repeats := max(min(e.Sizes.Repeats, 3), 1)
	for r := 0; r < repeats; r++ {
		for i := range modes {
			m := modes[(i+r)%len(modes)]
			run, err := runProcs(ctx, e, n, body, m.procs, m.consumers)
			if err != nil {
				return fmt.Errorf("%s: %w", m.what, err)
			}
			m.runs = append(m.runs, run)
			e.logf("sqlite: %s: %s", m.what, perSec(run.rate))
		}
	}
	med := make([]float64, len(modes))
	for i, m := range modes {
		med[i] = medianOf(m.runs, func(r twoProcRun) float64 { return r.rate })
		s.add(Row{What: "drain of one file: " + m.what, Figure: perSec(med[i]), Note: describeChildren(m.runs)})
	}
	ratio := med[2] / med[0]
	row := Row{What: "two processes ÷ one process (1 consumer)", Figure: fmt.Sprintf("%.2f×", ratio),
		Target: fmt.Sprintf("≥ %.2f×", TwoProcessTarget), Holds: verdict(ratio >= TwoProcessTarget)}
	cpu1, on1 := childCPU(modes[0].runs)
	cpu2, on2 := childCPU(modes[2].runs)
	row.Note = fmt.Sprintf("CPU per message: %s in one process, %s in two (%.2f×); on a CPU %.0f%% of the wall time in one, %.0f%% in two",
		usString(cpu1), usString(cpu2), cpu2.Seconds()/cpu1.Seconds(), on1*100, on2*100)
	if ratio < TwoProcessTarget {
		row.Note = "missed: " + row.Note + " (off a CPU, a process waits for the write lock, which SQLite gives one writer at a time, " +
			"or for a core)"
	}
	s.add(row)
	s.add(Row{What: "two processes ÷ one process with 2 consumers", Figure: fmt.Sprintf("%.2f×", med[2]/med[1])})
	s.note("Two processes: on a machine that other processes keep busy, two processes get a larger share of the cores than one, " +
		"and the rate ratio says more about that share than about SQLite; the CPU per message (the children's getrusage) does not " +
		"depend on it, and shows what sharing the file costs per message: SQLite drops a connection's page cache when another " +
		"connection has written, so a turn at the write lock may begin by reading back pages the other process changed.")
	return nil
}

// childCPU is the children's CPU per message and the fraction of their
// wall time they were on a CPU, over runs.
func childCPU(runs []twoProcRun) (time.Duration, float64) {
	var cpu, wall, msgs int64
	for _, r := range runs {
		for _, c := range r.children {
			cpu += c.CPUNs
			wall += c.End - c.Start
			msgs += c.Drained
		}
	}
	return time.Duration(cpu / max(msgs, 1)), float64(cpu) / float64(max(wall, 1))
}

// describeChildren summarizes where the children's time went over runs.
func describeChildren(runs []twoProcRun) string {
	var calls, slow, getNs, delNs, cpuNs, wallNs, msgs int64
	for _, r := range runs {
		for _, c := range r.children {
			msgs += c.Drained
			calls += c.Calls
			slow += c.SlowCalls
			getNs += c.GetNs
			delNs += c.DelNs
			cpuNs += c.CPUNs
			wallNs += c.End - c.Start
		}
	}
	if calls == 0 {
		return ""
	}
	return fmt.Sprintf("%s of CPU per message; per call: Get(32) %s, DeleteBatch %s on average; %.1f%% of calls took ≥ 1 ms; the children were on a CPU %.0f%% of their wall time",
		usString(time.Duration(cpuNs/max(msgs, 1))), usString(time.Duration(getNs/max(calls/2, 1))), usString(time.Duration(delNs/max(calls/2, 1))),
		100*float64(slow)/float64(calls), 100*float64(cpuNs)/float64(max(wallNs, 1)))
}

// runProcs fills a fresh file with n messages and drains it with procs
// child processes of consumers consumers each.
func runProcs(ctx context.Context, e *Env, n int, body []byte, procs, consumers int) (twoProcRun, error) {
	dir, err := e.tempDir("twoproc")
	if err != nil {
		return twoProcRun{}, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "shared.db")
	db, err := sqlite.Open(path)
	if err != nil {
		return twoProcRun{}, err
	}
	q, err := db.Queue("shared")
	if err == nil {
		err = fillParallel(ctx, q, n, 8, body)
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return twoProcRun{}, err
	}
	res := make([]childResult, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() {
			res[i], errs[i] = e.runChild(ctx, childRequest{Kind: "sqlite-drain", Path: path, Tasks: consumers})
		})
	}
	wg.Wait()
	var drained int64
	var start, end int64 = math.MaxInt64, 0
	for i := range procs {
		if errs[i] != nil {
			return twoProcRun{}, errs[i]
		}
		drained += res[i].Drained
		start, end = min(start, res[i].Start), max(end, res[i].End)
	}
	if drained != int64(n) {
		return twoProcRun{}, fmt.Errorf("the children drained %d of %d", drained, n)
	}
	return twoProcRun{rate: rate(n, time.Duration(end-start)), children: res}, nil
}

// sqliteDrainChild is the child side of the two-process comparison: it
// drains the file at req.Path with req.Tasks consumers of Get(32) and
// DeleteBatch until a get finds the queue empty.
func sqliteDrainChild(ctx context.Context, req childRequest, res *childResult) error {
	db, err := sqlite.Open(req.Path)
	if err != nil {
		return err
	}
	defer db.Close()
	q, err := db.Queue("shared")
	if err != nil {
		return err
	}
	c0, _ := cpuTime()
	var drained, calls, slow, getNs, delNs atomic.Int64
	var first atomic.Int64
	first.Store(math.MaxInt64)
	errs := make(chan error, req.Tasks)
	var wg sync.WaitGroup
	for range max(req.Tasks, 1) {
		wg.Go(func() {
			rs := make([]queue.Receipt, 0, queue.MaxBatchSize)
			for {
				t := time.Now()
				for {
					f := first.Load()
					if t.UnixNano() >= f || first.CompareAndSwap(f, t.UnixNano()) {
						break
					}
				}
				ms, err := q.Get(ctx, queue.MaxBatchSize, time.Minute)
				d := time.Since(t)
				getNs.Add(int64(d))
				calls.Add(1)
				if d >= time.Millisecond {
					slow.Add(1)
				}
				if queue.IsTransient(err) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				if len(ms) == 0 {
					return
				}
				rs = rs[:0]
				for _, m := range ms {
					rs = append(rs, queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
				}
				t = time.Now()
				out, err := q.DeleteBatch(ctx, rs)
				d = time.Since(t)
				delNs.Add(int64(d))
				calls.Add(1)
				if d >= time.Millisecond {
					slow.Add(1)
				}
				if err != nil {
					errs <- err
					return
				}
				for _, r := range out {
					if r != nil {
						errs <- r
						return
					}
				}
				drained.Add(int64(len(ms)))
			}
		})
	}
	wg.Wait()
	end := time.Now()
	c1, _ := cpuTime()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	res.Drained, res.Calls, res.SlowCalls = drained.Load(), calls.Load(), slow.Load()
	res.GetNs, res.DelNs = getNs.Load(), delNs.Load()
	res.Start, res.End, res.CPUNs = first.Load(), end.UnixNano(), int64(c1-c0)
	return nil
}
