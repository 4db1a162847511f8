package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
)

// WorkEfficiencyTarget: a sleeping handler's process rate should reach
// this fraction of concurrency ÷ cost.
const WorkEfficiencyTarget = 0.8

// workTasks is the fixed pool of the grid: enough tasks to keep 128 slots
// fed (a task holds at most a batch plus the new-batch threshold, 48).
const workTasks = 4

var (
	workCosts       = []time.Duration{0, time.Millisecond, 10 * time.Millisecond}
	workConcurrency = []int{1, 16, 128}
)

type workCell struct {
	cost        time.Duration
	concurrency int
	rate        float64
	inFlight    float64       // mean handlers running
	cores       float64       // CPU time ÷ wall time over the window
	machine     float64       // cores the whole machine kept busy (NaN: unknown)
	slept       time.Duration // mean time a sleeping handler's sleep lasted
	cpuPerMsg   time.Duration
	drainedOut  bool // the backlog ran out before the window ended
}

// expected is concurrency ÷ cost, or +Inf for a no-op handler.
func (c workCell) expected() float64 {
	if c.cost == 0 {
		return math.Inf(1)
	}
	return float64(c.concurrency) / c.cost.Seconds()
}

func scalingWithWork(ctx context.Context, e *Env, s *Section) error {
	w := e.Sizes.WorkWindow
	warm := w / 10
	s.how("Memory driver, a fixed pool of %d tasks (MinTasks = MaxTasks = %d, no scaling agent), handler concurrency 1, 16 or 128, "+
		"a handler that sleeps 0 (returns at once), 1 ms or 10 ms. Each cell starts on a backlog big enough for its window "+
		"(at most %s messages), warms up %s, then counts messages deleted over %s (or until the backlog runs out). "+
		"**In flight** is the mean number of handlers running, sampled every 2 ms; **CPU** is the cores this process kept "+
		"busy (getrusage user+system time ÷ the window) and, after the slash, the cores the whole machine kept busy "+
		"(/proc/stat), out of %d. The expected rate for a sleeping handler is concurrency ÷ cost; the target is %.0f%% of it. "+
		"**Slept** is how long the handlers' sleeps really lasted, on average. The rate of a sleeping cell is then "+
		"(in flight ÷ concurrency) × (cost ÷ slept) × concurrency ÷ cost: slots kept full, times sleeps on time. The listener "+
		"fetches min(32, concurrency) messages per get, so at concurrency 1 every message costs a whole get/delete cycle.",
		workTasks, workTasks, commas(int64(e.Sizes.WorkBacklog)), warm, w, runtime.NumCPU(), WorkEfficiencyTarget*100)
	var cells []workCell
	for _, cost := range workCosts {
		for _, k := range workConcurrency {
			c, err := runWorkCellRetrying(ctx, cost, k, warm, w, e.Sizes.WorkBacklog)
			if err != nil {
				return fmt.Errorf("cost %s, concurrency %d: %w", cost, k, err)
			}
			e.logf("work: cost %s concurrency %d: %s, in flight %.1f, %.2f cores", cost, k, perSec(c.rate), c.inFlight, c.cores)
			cells = append(cells, c)
		}
	}
	ceiling := map[int]float64{} // the no-op rate per concurrency: the listener's own ceiling
	for _, c := range cells {
		if c.cost == 0 {
			ceiling[c.concurrency] = c.rate
		}
	}
	ncpu := float64(runtime.NumCPU())
	for _, c := range cells {
		row := Row{
			What:   fmt.Sprintf("handler %s, concurrency %d", costLabel(c.cost), c.concurrency),
			Figure: fmt.Sprintf("%s (in flight %.1f, slept %s; CPU %s)", perSec(c.rate), c.inFlight, ms(c.slept), cpuLabel(c)),
		}
		if c.cost == 0 {
			row.Figure = fmt.Sprintf("%s (CPU %s)", perSec(c.rate), cpuLabel(c))
		}
		if c.cost > 0 {
			eff := c.rate / c.expected()
			row.Target = fmt.Sprintf("≥ %.0f%% of %s", WorkEfficiencyTarget*100, perSec(c.expected()))
			row.Holds = verdict(eff >= WorkEfficiencyTarget)
			row.Note = fmt.Sprintf("%.0f%% of concurrency ÷ cost; ", eff*100)
		}
		row.Note += why(c, ceiling[c.concurrency], ncpu)
		s.add(row)
	}
	// The flattening, in words, from the numbers.
	var flat []string
	for _, c := range cells {
		if c.cost > 0 && c.rate/c.expected() < WorkEfficiencyTarget {
			flat = append(flat, fmt.Sprintf("%s × %d (%s of the expected %s)", costLabel(c.cost), c.concurrency, perSec(c.rate), perSec(c.expected())))
		}
	}
	if len(flat) == 0 {
		s.note("Throughput grows as concurrency ÷ cost in every sleeping cell: the handlers' sleep is the bottleneck, and the " +
			"listener keeps the slots full (in flight ≈ concurrency).")
	} else {
		s.note("Throughput grows as concurrency ÷ cost until it meets a ceiling; it flattens at %s. The notes of those rows say "+
			"which ceiling, from the measured CPU and in-flight figures.", strings.Join(flat, ", "))
	}
	for _, c := range cells {
		if c.cost == time.Millisecond && c.concurrency == 128 {
			s.note("The no-op rows are the listener's own ceiling on this machine: %s at concurrency 128, %s of CPU per message. "+
				"With 1 ms sleeps at concurrency 128 the process used %.2f cores (%s per message, the timers and goroutine "+
				"wake-ups included) for %s, so where that cell falls short of %s, CPU is not the reason unless the machine's "+
				"other processes took the cores (the second CPU figure).",
				perSec(ceiling[128]), usString(cellCPU(cells, 0, 128)), c.cores, usString(c.cpuPerMsg), perSec(c.rate), perSec(c.expected()))
		}
	}
	return nil
}

func costLabel(d time.Duration) string {
	if d == 0 {
		return "no-op"
	}
	return "sleep " + d.String()
}

// why explains a cell's figure from its own measurements.
func why(c workCell, ceiling, ncpu float64) string {
	others := ""
	if !math.IsNaN(c.machine) && c.machine-c.cores >= 0.5 {
		others = fmt.Sprintf("; other processes kept %.2f of the %.0f cores busy meanwhile", c.machine-c.cores, ncpu)
	}
	if c.cost == 0 {
		return fmt.Sprintf("no wait to overlap: the rate is the get → handler → delete cycle at %s of CPU per message "+
			"(batches of %d), on one queue lock; this process kept %.2f cores busy%s",
			usString(c.cpuPerMsg), min(queue.MaxBatchSize, c.concurrency), c.cores, others)
	}
	fillPct := c.inFlight / float64(c.concurrency)
	holdPct := c.cost.Seconds() / c.slept.Seconds()
	parts := fmt.Sprintf("slots %.0f%% full (%.1f of %d) × sleeps on time %.0f%% (%s for %s)",
		fillPct*100, c.inFlight, c.concurrency, holdPct*100, ms(c.slept), c.cost)
	if c.rate/c.expected() >= WorkEfficiencyTarget {
		return "handler-bound: " + parts + others
	}
	var reasons []string
	if holdPct < 0.9 {
		reasons = append(reasons, fmt.Sprintf("the sleeps end late: %s for %s, the Go runtime's timer wake-up latency at %s wake-ups a second",
			ms(c.slept), c.cost, commas(int64(c.rate))))
	}
	if fillPct < 0.9 {
		r := fmt.Sprintf("the slots are not kept full: a task gets only once %d slots are free (full batches, the fewest billed calls), "+
			"so up to a batch of slots waits while they free up", min(queue.MaxBatchSize, c.concurrency))
		if c.cores >= 0.8*ncpu {
			r += fmt.Sprintf(", and this process is CPU-bound (%.2f of %.0f cores, %s of CPU per message)", c.cores, ncpu, usString(c.cpuPerMsg))
		}
		reasons = append(reasons, r)
	}
	if len(reasons) == 0 {
		reasons = append(reasons, "both small losses compound")
	}
	return parts + "; " + strings.Join(reasons, "; ") + others
}

func cellCPU(cells []workCell, cost time.Duration, k int) time.Duration {
	for _, c := range cells {
		if c.cost == cost && c.concurrency == k {
			return c.cpuPerMsg
		}
	}
	return 0
}

// cpuLabel is "process / machine cores".
func cpuLabel(c workCell) string {
	if math.IsNaN(c.machine) {
		return fmt.Sprintf("%.2f cores", c.cores)
	}
	return fmt.Sprintf("%.2f / %.2f cores", c.cores, c.machine)
}

func usString(d time.Duration) string {
	return fmt.Sprintf("%.2f µs", float64(d)/float64(time.Microsecond))
}

// errBacklogOut: the listener drained the whole backlog before the warm-up
// ended (a free handler on a fast machine), so the cell measured nothing.
var errBacklogOut = errors.New("the backlog ran out during the warm-up")

// runWorkCellRetrying runs the cell again with a backlog four times larger
// each time the backlog ran out during the warm-up, up to 64 times
// maxBacklog: how fast the machine is must not decide whether the cell can
// be measured.
func runWorkCellRetrying(ctx context.Context, cost time.Duration, k int, warm, window time.Duration, maxBacklog int) (workCell, error) {
	for b := maxBacklog; ; b *= 4 {
		c, err := runWorkCell(ctx, cost, k, warm, window, b)
		if !errors.Is(err, errBacklogOut) || b >= 64*maxBacklog {
			return c, err
		}
	}
}

func runWorkCell(ctx context.Context, cost time.Duration, k int, warm, window time.Duration, maxBacklog int) (workCell, error) {
	c := workCell{cost: cost, concurrency: k}
	exp := c.expected()
	backlog := maxBacklog
	if !math.IsInf(exp, 1) {
		backlog = min(maxBacklog, int(exp*(warm+window).Seconds()*1.3)+1000)
	}
	q, err := memory.NewStore().Queue("work")
	if err != nil {
		return c, err
	}
	if err := fill(ctx, q, backlog, smallBody); err != nil {
		return c, err
	}
	var g gauge
	var sleptSum, sleeps atomic.Int64
	h := func(ctx context.Context, _ *queue.Message) error {
		g.enter()
		defer g.leave()
		if cost > 0 {
			start := time.Now()
			t := time.NewTimer(cost)
			select {
			case <-t.C:
				sleptSum.Add(int64(time.Since(start)))
				sleeps.Add(1)
			case <-ctx.Done():
				t.Stop()
			}
		}
		return nil
	}
	l, err := listener.New(q, h, listener.Options{
		Tasks: workTasks, MinTasks: workTasks, MaxTasks: workTasks,
		Concurrency:       k,
		VisibilityTimeout: 10 * time.Minute,
	})
	if err != nil {
		return c, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := l.Start(runCtx, workTasks); err != nil {
		return c, err
	}
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() { defer close(sampled); g.sample(2*time.Millisecond, stopSampling) }()

	waitUntil := func(d time.Duration, limit int64) {
		end := time.Now().Add(d)
		for time.Now().Before(end) && l.Drained() < limit && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
	}
	// The warm-up ends early once half the backlog is drained, so that a
	// fast machine (or a tiny run) keeps the other half for the window.
	waitUntil(warm, int64(backlog)/2)
	g.reset()
	sleptSum.Store(0)
	sleeps.Store(0)
	d0, t0 := l.Drained(), time.Now()
	cpu0, _ := cpuTime()
	m0 := readMachineCPU()
	waitUntil(window, int64(backlog))
	d1, t1 := l.Drained(), time.Now()
	cpu1, _ := cpuTime()
	m1 := readMachineCPU()
	close(stopSampling)
	<-sampled
	cancel()
	if err := l.Wait(); err != nil {
		return c, err
	}
	if d0 >= int64(backlog) {
		return c, fmt.Errorf("%w (%d messages)", errBacklogOut, backlog)
	}
	el := t1.Sub(t0)
	c.rate = float64(d1-d0) / el.Seconds()
	c.inFlight = g.mean()
	c.cores = float64(cpu1-cpu0) / float64(el)
	// The two readings differ in resolution (/proc/stat counts 10 ms
	// ticks): the machine is never less busy than this process.
	c.machine = math.Max(coresBusy(m0, m1, runtime.NumCPU()), c.cores)
	if n := sleeps.Load(); n > 0 {
		c.slept = time.Duration(sleptSum.Load() / n)
	}
	if d1 > d0 {
		c.cpuPerMsg = (cpu1 - cpu0) / time.Duration(d1-d0)
	}
	c.drainedOut = d1 >= int64(backlog)
	return c, nil
}
