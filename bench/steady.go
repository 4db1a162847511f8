package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/queue/sqlite"
)

// Steady-rate targets (issue 14), for SQLite at the listener's defaults (a
// 10 ms latency target, since SQLite's calls are not billed).
const (
	// SteadyTriggerP99Target bounds put → handler start with the trigger
	// at 200 and 2,000 msgs/s.
	SteadyTriggerP99Target = 10 * time.Millisecond
	// SteadyPollP99Target bounds it without a trigger at 200 msgs/s.
	SteadyPollP99Target = 50 * time.Millisecond
	// SteadyCallsTarget bounds the calls per message, its put included,
	// with the trigger at 2,000 msgs/s: a get of ~10 and a batch delete
	// per 5 ms cadence.
	SteadyCallsTarget = 1.2
)

// steadyRates are the arrival rates of the section, in messages a second.
var steadyRates = []int{50, 200, 2000}

type steadyCell struct {
	backend  string
	rate     int
	trigger  bool
	msgs     int // pickups measured (after the warm-up)
	p50, p99 time.Duration
	max      time.Duration
	calls    float64       // per message, the put included
	gets     float64       // consumer gets per second
	late     time.Duration // p99 lateness of a 5 ms sleep meanwhile: the machine's scheduling delay
}

func (c steadyCell) label() string {
	how := "trigger"
	if !c.trigger {
		how = "no trigger"
		if c.backend == "SQLite" {
			how = "no trigger, producer in another process"
		}
	}
	return fmt.Sprintf("%s, %s msgs/s, %s", c.backend, commas(int64(c.rate)), how)
}

func steadyRatesSection(ctx context.Context, e *Env, s *Section) error {
	w := e.Sizes.SteadyWindow
	warm := steadyWarm(w)
	s.how("A producer puts messages at a steady rate (%s msgs/s) for %s; one listener with its defaults (one task; the embedded "+
		"drivers' calls are not billed, so its latency target is %s: gets paced at %s after one that drained the queue, a %s trigger "+
		"floor, idle.min and idle.delta %s) and a no-op handler takes them. Each body is the wall-clock time just before its "+
		"Put; the handler subtracts it from its own start: **put → handler start**, p50 / p99 over the messages put after a "+
		"%s warm-up. **Calls per message** are the listener's gets and delete batches from its first message on, divided by "+
		"the messages it handled, plus 1 for the put. **Trigger**: the producer is in the listener's process and calls "+
		"`LocalNotifier.Notify` after each put, as `Worker.Put` does. **No trigger**: on SQLite the producer is another "+
		"process writing the same file (no HTTP trigger), on memory a goroutine that does not notify. Each cell has a fresh "+
		"database file or store. The producer puts what is due, then sleeps until the next is: at 2,000 msgs/s puts come "+
		"in small clumps as the sleep's wake-up allows.",
		joinInts(steadyRates), w, listener.DefaultLatencyTargetFree, listener.DefaultLatencyTargetFree/2,
		listener.DefaultLatencyTargetFree/2, listener.DefaultLatencyTargetFree/2, warm)
	dir, err := e.tempDir("steady")
	if err != nil {
		return err
	}
	var cells []steadyCell
	for _, backend := range []string{"SQLite", "memory"} {
		for _, trig := range []bool{true, false} {
			for _, rate := range steadyRates {
				c := steadyCell{backend: backend, rate: rate, trigger: trig}
				if err := runSteadyCell(ctx, e, &c, dir, w); err != nil {
					return fmt.Errorf("%s: %w", c.label(), err)
				}
				e.logf("steady: %s: p50 %s p99 %s, %.3f calls/msg, %.0f gets/s, 5 ms sleep late %s (p99) (load %s)",
					c.label(), ms(c.p50), ms(c.p99), c.calls, c.gets, ms(c.late), loadAverage())
				cells = append(cells, c)
			}
		}
	}
	var missed []string
	for _, c := range cells {
		row := Row{
			What:   c.label() + ": put → handler start p50 / p99; calls per message",
			Figure: fmt.Sprintf("%s / %s; %.3f calls", ms(c.p50), ms(c.p99), c.calls),
			Note: fmt.Sprintf("%s pickups; max %s; %.0f gets/s; a 5 ms sleep woke up to %s late (p99) meanwhile",
				commas(int64(c.msgs)), ms(c.max), c.gets, ms(c.late)),
		}
		if c.backend == "SQLite" {
			switch {
			case c.trigger && c.rate == 2000:
				row.Target = fmt.Sprintf("p99 ≤ %s; ≤ %.1f calls", ms(SteadyTriggerP99Target), SteadyCallsTarget)
				row.Holds = verdict(c.p99 <= SteadyTriggerP99Target && c.calls <= SteadyCallsTarget)
			case c.trigger && c.rate == 200:
				row.Target = fmt.Sprintf("p99 ≤ %s", ms(SteadyTriggerP99Target))
				row.Holds = verdict(c.p99 <= SteadyTriggerP99Target)
			case !c.trigger && c.rate == 200:
				row.Target = fmt.Sprintf("p99 ≤ %s", ms(SteadyPollP99Target))
				row.Holds = verdict(c.p99 <= SteadyPollP99Target)
			}
			if row.Holds == No {
				missed = append(missed, c.label())
			}
		}
		s.add(row)
	}
	s.note("The trade: a lower latency target means more gets while work trickles in; `adaptq simulate --rate R --batch-delete " +
		"--plot trade.svg` shows it for any rate. At 50 and 200 msgs/s a paced get finds about one message, so a message costs " +
		"its put, about one get and one delete; at 2,000 msgs/s a get every 5 ms finds about ten.")
	if len(missed) > 0 {
		s.note("Missed: %s. The load average at the end of the section was %s on %d cores; the slowest pickups are those "+
			"whose task, producer or timer waited for a core (each row's note gives how late a 5 ms sleep woke meanwhile).",
			strings.Join(missed, "; "), loadAverage(), runtime.NumCPU())
	}
	return nil
}

// steadyProbe is the sleep whose lateness each cell reports.
const steadyProbe = 5 * time.Millisecond

func steadyWarm(w time.Duration) time.Duration { return max(w/5, 100*time.Millisecond) }

func joinInts(xs []int) string {
	s := ""
	for i, x := range xs {
		if i > 0 {
			s += ", "
		}
		s += commas(int64(x))
	}
	return s
}

// runSteadyCell runs one rate on one backend and fills c's figures.
func runSteadyCell(ctx context.Context, e *Env, c *steadyCell, dir string, window time.Duration) error {
	m := meter.New(0)
	var consumer, producer *queue.Queue
	var path string
	name := "steady"
	switch c.backend {
	case "SQLite":
		path = filepath.Join(dir, fmt.Sprintf("steady-%d-%v.db", c.rate, c.trigger))
		db, err := sqlite.Open(path)
		if err != nil {
			return err
		}
		defer db.Close()
		if consumer, err = db.Queue(name, queue.WithObserver(m)); err != nil {
			return err
		}
		if producer, err = db.Queue(name); err != nil {
			return err
		}
	default:
		st := memory.NewStore()
		var err error
		if consumer, err = st.Queue(name, queue.WithObserver(m)); err != nil {
			return err
		}
		if producer, err = st.Queue(name); err != nil {
			return err
		}
	}

	var (
		mu      sync.Mutex
		lat     []time.Duration
		first   atomic.Int64 // the first stamp seen
		handled atomic.Int64
		m0      meter.Snapshot
		h0      int64
		once    sync.Once
	)
	warm := steadyWarm(window)
	h := func(_ context.Context, msg *queue.Message) error {
		now := time.Now()
		stamp, err := strconv.ParseInt(string(msg.Body), 10, 64)
		if err != nil {
			return nil
		}
		once.Do(func() {
			first.Store(stamp)
			m0, h0 = m.Snapshot(), handled.Load()
		})
		n := handled.Add(1)
		_ = n
		if stamp >= first.Load()+int64(warm) {
			mu.Lock()
			lat = append(lat, now.Sub(time.Unix(0, stamp)))
			mu.Unlock()
		}
		return nil
	}
	var n listener.LocalNotifier
	o := listener.Options{}
	if c.trigger {
		o.Notifier = &n
	}
	l, err := listener.New(consumer, h, o)
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := l.Start(runCtx, 1); err != nil {
		return err
	}
	defer func() { cancel(); _ = l.Wait() }()
	time.Sleep(50 * time.Millisecond) // the task is idle when the first message comes

	// The machine's scheduling delay meanwhile: how late a 5 ms sleep wakes
	// (the cadence's, rare enough not to load the machine itself).
	var lateness []time.Duration
	probeDone := make(chan struct{})
	probeCtx, stopProbe := context.WithCancel(ctx)
	go func() {
		defer close(probeDone)
		for probeCtx.Err() == nil {
			t0 := time.Now()
			time.Sleep(steadyProbe)
			lateness = append(lateness, time.Since(t0)-steadyProbe)
		}
	}()
	defer func() { stopProbe(); <-probeDone }()

	var put int64
	d := warm + window
	if c.backend == "SQLite" && !c.trigger {
		res, err := e.runChild(ctx, childRequest{Kind: "produce", Path: path, Queue: name, Rate: c.rate, Duration: d})
		if err != nil {
			return err
		}
		put = res.Drained
	} else {
		var notify func()
		if c.trigger {
			notify = func() { n.Notify(name) }
		}
		if put, err = produce(ctx, producer, c.rate, d, notify); err != nil {
			return err
		}
	}
	if err := waitFor(ctx, 30*time.Second, func() bool { return handled.Load() >= put }); err != nil {
		return fmt.Errorf("%d of %d handled: %w", handled.Load(), put, err)
	}
	stopProbe()
	<-probeDone
	if len(lateness) > 0 {
		c.late = percentile(lateness, 99)
	}
	calls := m.Snapshot().Sub(m0)
	if calls.TotalErrors() > 0 {
		return fmt.Errorf("%d calls failed", calls.TotalErrors())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lat) == 0 {
		return fmt.Errorf("no pickups after the warm-up")
	}
	hs := handled.Load() - h0
	c.msgs = len(lat)
	c.p50, c.p99, c.max = percentile(lat, 50), percentile(lat, 99), slices.Max(lat)
	c.calls = 1 + float64(calls.Gets()+calls.Calls[meter.Delete]+calls.Calls[meter.DeleteBatch])/float64(max(hs, 1))
	c.gets = float64(calls.Gets()) / d.Seconds()
	return nil
}

// produce puts stamped messages into q at rate a second for d, calling
// notify after each put if set, and returns how many it put. Each body is
// the wall-clock time just before its Put, in Unix nanoseconds.
func produce(ctx context.Context, q *queue.Queue, rate int, d time.Duration, notify func()) (int64, error) {
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	var n int64
	for {
		el := time.Since(start)
		if el >= d {
			return n, nil
		}
		for due := int64(el/interval) + 1; n < due; n++ {
			body := strconv.AppendInt(nil, time.Now().UnixNano(), 10)
			if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
				return n, err
			}
			if notify != nil {
				notify()
			}
		}
		if err := ctx.Err(); err != nil {
			return n, err
		}
		time.Sleep(time.Until(start.Add(time.Duration(n) * interval)))
	}
}
