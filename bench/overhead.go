package bench

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
)

// listenerSlotsPerTask is the handler concurrency the overhead runs give
// each task: a batch being handled and the next one fetched at the
// new-batch threshold (32 + 16), as listener/bench_test.go does.
const listenerSlotsPerTask = queue.MaxBatchSize + queue.MaxBatchSize/2

// OverheadTarget: the listener keeps at least this fraction of the plain
// loop's throughput (issue 11: "stays ≥ 0.95 with 1 and 4 tasks").
const OverheadTarget = 0.95

type drainResult struct {
	rate   float64
	allocs allocs
}

func overhead(ctx context.Context, e *Env, s *Section) error {
	n := e.Sizes.Overhead
	s.how("Memory driver, a no-op handler, %s messages of %d bytes put before each run (not timed). "+
		"The **plain loop** is the consumer a user would write by hand (`listener/bench_test.go`'s `plainLoop`): each worker "+
		"gets 32, runs the handler inline, deletes the batch in one call, until the queue is empty. The **listener** runs with "+
		"the same number of tasks and a handler concurrency of %d per task (a batch being handled plus the next one fetched at "+
		"the new-batch threshold), timed from Start to its %s-th delete. Each figure is the median of %d runs; plain and listener "+
		"runs alternate. Allocations and bytes are `runtime.MemStats` deltas over the whole run, per message.",
		commas(int64(n)), len(smallBody), listenerSlotsPerTask, commas(int64(n)), e.Sizes.Repeats)
	for _, tasks := range []int{1, 4} {
		var plain, lis []drainResult
		for r := 0; r < e.Sizes.Repeats; r++ {
			for i := 0; i < 2; i++ {
				if (i == 0) == (r%2 == 0) {
					res, err := runPlain(ctx, n, tasks)
					if err != nil {
						return fmt.Errorf("plain loop, %d workers: %w", tasks, err)
					}
					plain = append(plain, res)
				} else {
					res, err := runListener(ctx, n, tasks)
					if err != nil {
						return fmt.Errorf("listener, %d tasks: %w", tasks, err)
					}
					lis = append(lis, res)
				}
			}
		}
		ps, ls := summarize(plain, n), summarize(lis, n)
		pr, lr := ps.rate, ls.rate
		e.logf("overhead: tasks=%d plain %s listener %s", tasks, perSec(pr), perSec(lr))
		ratio := lr / pr
		s.add(Row{
			What:   fmt.Sprintf("plain loop, %d worker%s: get 32 → no-op → batch delete", tasks, plural(tasks)),
			Figure: ps.String(),
			Note:   "the baseline",
		})
		s.add(Row{
			What:   fmt.Sprintf("listener, %d task%s, concurrency %d", tasks, plural(tasks), tasks*listenerSlotsPerTask),
			Figure: ls.String(),
		})
		note := fmt.Sprintf("per message the listener takes %+.0f ns and %+.2f allocations against the loop (medians)",
			1e9/lr-1e9/pr, ls.allocsPer-ps.allocsPer)
		if ratio > 1 {
			note += "; a ratio above 1 is the runs' spread (the ranges above), not a listener faster than the loop"
		}
		s.add(Row{
			What:   fmt.Sprintf("listener ÷ plain loop, %d task%s", tasks, plural(tasks)),
			Figure: fmt.Sprintf("%.2f", ratio),
			Target: fmt.Sprintf("≥ %.2f", OverheadTarget),
			Holds:  verdict(ratio >= OverheadTarget),
			Note:   note,
		})
	}

	// Peak RSS, each in a fresh child process.
	b := e.Sizes.Backlog
	s.how("Peak RSS: each line is a fresh child process (this program run again), which puts a backlog of %s messages "+
		"into the memory driver and then does what the line says; the figure is its VmHWM from /proc/self/status "+
		"(getrusage's maxrss where there is no /proc), so the harness's own heap is not counted.", commas(int64(b)))
	type rssRun struct {
		what string
		req  childRequest
	}
	runs := []rssRun{
		{"a Go process that does nothing (the floor)", childRequest{Kind: "idle"}},
		{fmt.Sprintf("backlog of %s, no consumer", commas(int64(b))), childRequest{Kind: "backlog", N: b}},
		{fmt.Sprintf("backlog of %s drained by the plain loop, 1 worker", commas(int64(b))), childRequest{Kind: "plain", N: b, Tasks: 1}},
		{fmt.Sprintf("backlog of %s drained by the listener, 1 task", commas(int64(b))), childRequest{Kind: "listener", N: b, Tasks: 1}},
		{fmt.Sprintf("backlog of %s drained by the listener, 4 tasks", commas(int64(b))), childRequest{Kind: "listener", N: b, Tasks: 4}},
	}
	hwm := map[string]int64{}
	for _, r := range runs {
		res, err := e.runChild(ctx, r.req)
		if err != nil {
			return fmt.Errorf("peak RSS: %w", err)
		}
		if r.req.Kind != "idle" && r.req.Kind != "backlog" && res.Drained != int64(r.req.N) {
			return fmt.Errorf("peak RSS: child %s drained %d of %d", r.req.Kind, res.Drained, r.req.N)
		}
		key := r.req.Kind + fmt.Sprint(r.req.Tasks)
		hwm[key] = res.HWMKiB
		row := Row{What: "peak RSS: " + r.what, Figure: mib(res.HWMKiB), Note: res.Source}
		switch key {
		case "plain1":
			row.Note = fmt.Sprintf("%s; %+.1f MiB vs the backlog alone", res.Source, float64(res.HWMKiB-hwm["backlog0"])/1024)
		case "listener1", "listener4":
			row.Note = fmt.Sprintf("%s; %+.1f MiB vs the plain loop", res.Source, float64(res.HWMKiB-hwm["plain1"])/1024)
		}
		s.add(row)
	}
	s.note("Peak RSS has no target of its own; what matters is the listener's cost over the plain loop on the same backlog, "+
		"%+.1f MiB with 1 task, %+.1f MiB with 4 (a difference of a few MiB is within the run-to-run spread of Go's heap "+
		"growth). Most of the peak is the backlog itself: the memory driver keeps every message in the process.",
		float64(hwm["listener1"]-hwm["plain1"])/1024, float64(hwm["listener4"]-hwm["plain1"])/1024)
	return nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// summary is a series of runs: the median rate, its spread, and the
// allocations per message over all of them.
type summary struct {
	rate, lo, hi        float64
	allocsPer, bytesPer float64
}

func summarize(rs []drainResult, n int) summary {
	rates := make([]float64, len(rs))
	var a allocs
	for i, r := range rs {
		rates[i] = r.rate
		a.mallocs += r.allocs.mallocs
		a.bytes += r.allocs.bytes
	}
	var s summary
	s.allocsPer, s.bytesPer = a.per(n * len(rs))
	s.rate = median(rates) // sorts rates
	s.lo, s.hi = rates[0], rates[len(rates)-1]
	return s
}

func (s summary) String() string {
	return fmt.Sprintf("%s (runs %s–%s); %.2f allocs, %.0f B per message",
		perSec(s.rate), commas(int64(math.Round(s.lo))), commas(int64(math.Round(s.hi))), s.allocsPer, s.bytesPer)
}

func runPlain(ctx context.Context, n, workers int) (drainResult, error) {
	q, err := memory.NewStore().Queue("overhead")
	if err != nil {
		return drainResult{}, err
	}
	if err := fill(ctx, q, n, smallBody); err != nil {
		return drainResult{}, err
	}
	var d time.Duration
	var done int64
	a, err := measureAllocs(func() error {
		start := time.Now()
		var err error
		done, err = plainLoop(ctx, q, workers, noop)
		d = time.Since(start)
		return err
	})
	if err != nil {
		return drainResult{}, err
	}
	if done != int64(n) {
		return drainResult{}, fmt.Errorf("plain loop deleted %d of %d", done, n)
	}
	return drainResult{rate: rate(n, d), allocs: a}, nil
}

func runListener(ctx context.Context, n, tasks int) (drainResult, error) {
	q, err := memory.NewStore().Queue("overhead")
	if err != nil {
		return drainResult{}, err
	}
	if err := fill(ctx, q, n, smallBody); err != nil {
		return drainResult{}, err
	}
	var d time.Duration
	a, err := measureAllocs(func() error {
		var err error
		d, _, err = drainListener(ctx, q, n, noop, listener.Options{Tasks: tasks, Concurrency: tasks * listenerSlotsPerTask}, 5*time.Minute)
		return err
	})
	if err != nil {
		return drainResult{}, err
	}
	return drainResult{rate: rate(n, d), allocs: a}, nil
}
