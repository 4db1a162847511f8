package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
)

// Bodies: the same as the packages' own benchmarks use.
var (
	// smallBody is the memory driver benchmarks' message (listener and
	// queue/memory bench_test.go).
	smallBody = []byte("a small message body of about fifty bytes .......")
	// jsonBody is queue/sqlite bench_test.go's message: a 128-byte JSON
	// document.
	jsonBody = []byte(`{"order":12345,"customer":"c-0001","items":[{"sku":"a-1","qty":2},{"sku":"b-7","qty":1}],"note":"benchmark message body"}`)
)

// noop is the handler that does nothing.
func noop(context.Context, *queue.Message) error { return nil }

// fill puts n messages from one goroutine.
func fill(ctx context.Context, q *queue.Queue, n int, body []byte) error {
	for i := 0; i < n; i++ {
		if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
			return fmt.Errorf("fill: %w", err)
		}
	}
	return nil
}

// fillParallel puts n messages from producers goroutines (on SQLite they
// share commits).
func fillParallel(ctx context.Context, q *queue.Queue, n, producers int, body []byte) error {
	var next atomic.Int64
	errs := make(chan error, producers)
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
					errs <- fmt.Errorf("fill: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// plainLoop is the hand-written consumer the listener is measured against
// (listener/bench_test.go's plainLoop): workers each get 32, run the
// handler inline and delete the batch in one call, until the queue is
// empty. It returns the number of messages deleted.
func plainLoop(ctx context.Context, q *queue.Queue, workers int, h func(context.Context, *queue.Message) error) (int64, error) {
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			rs := make([]queue.Receipt, 0, queue.MaxBatchSize)
			for {
				ms, err := q.Get(ctx, queue.MaxBatchSize, time.Minute)
				if err != nil {
					errs <- err
					return
				}
				if len(ms) == 0 {
					return
				}
				rs = rs[:0]
				for _, m := range ms {
					if h(ctx, m) == nil {
						rs = append(rs, queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
					}
				}
				res, err := q.DeleteBatch(ctx, rs)
				if err != nil {
					errs <- err
					return
				}
				for _, r := range res {
					if r == nil {
						done.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return done.Load(), <-errs
}

// errTimeout: a run did not finish within its deadline.
var errTimeout = errors.New("timed out")

// drainListener starts a listener on q and waits until it has drained n
// messages; it returns the time from Start to the n-th delete and the
// listener's counters. The listener is shut down before it returns.
func drainListener(ctx context.Context, q *queue.Queue, n int, h func(context.Context, *queue.Message) error, o listener.Options, limit time.Duration) (time.Duration, listener.Stats, error) {
	l, err := listener.New(q, h, o)
	if err != nil {
		return 0, listener.Stats{}, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	if err := l.Start(runCtx, l.Options().Tasks); err != nil {
		return 0, listener.Stats{}, err
	}
	deadline := start.Add(limit)
	var elapsed time.Duration
	for {
		if l.Drained() >= int64(n) {
			elapsed = time.Since(start)
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			cancel()
			_ = l.Wait()
			return 0, l.Stats(), fmt.Errorf("listener drained %d of %d messages: %w after %s", l.Drained(), n, errTimeout, limit)
		}
		time.Sleep(200 * time.Microsecond)
	}
	cancel()
	if err := l.Wait(); err != nil {
		return elapsed, l.Stats(), err
	}
	return elapsed, l.Stats(), nil
}

// allocs measures the heap allocations of f.
type allocs struct {
	mallocs, bytes uint64
}

func measureAllocs(f func() error) (allocs, error) {
	runtime.GC()
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	err := f()
	runtime.ReadMemStats(&b)
	return allocs{mallocs: b.Mallocs - a.Mallocs, bytes: b.TotalAlloc - a.TotalAlloc}, err
}

func (a allocs) per(n int) (float64, float64) {
	return float64(a.mallocs) / float64(n), float64(a.bytes) / float64(n)
}

// median of xs (xs is sorted in place).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	sort.Float64s(xs)
	m := len(xs) / 2
	if len(xs)%2 == 1 {
		return xs[m]
	}
	return (xs[m-1] + xs[m]) / 2
}

// percentile is the nearest-rank p-th percentile (0 < p ≤ 100) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

func maxDuration(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

func medianDuration(ds []time.Duration) time.Duration { return percentile(ds, 50) }

// rate is messages per second.
func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return math.Inf(1)
	}
	return float64(n) / d.Seconds()
}

// commas formats n with thousands separators.
func commas(n int64) string {
	neg := n < 0
	if neg {
		n = -n
	}
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// perSec formats a rate as "12,345 msgs/s".
func perSec(r float64) string {
	if math.IsInf(r, 0) || math.IsNaN(r) {
		return "n/a"
	}
	return commas(int64(math.Round(r))) + " msgs/s"
}

// ms formats a duration in milliseconds with sensible precision.
func ms(d time.Duration) string {
	f := float64(d) / float64(time.Millisecond)
	switch {
	case f < 10:
		return fmt.Sprintf("%.2f ms", f)
	case f < 100:
		return fmt.Sprintf("%.1f ms", f)
	default:
		return commas(int64(math.Round(f))) + " ms"
	}
}

// mib formats kibibytes as MiB.
func mib(kb int64) string { return fmt.Sprintf("%.1f MiB", float64(kb)/1024) }

// runner is a parallel handler gauge: how many handlers run at once,
// sampled.
type gauge struct {
	cur     atomic.Int64
	mu      sync.Mutex
	sum     float64
	samples int
}

func (g *gauge) enter() { g.cur.Add(1) }
func (g *gauge) leave() { g.cur.Add(-1) }

// sample records the current value every d until stop is closed.
func (g *gauge) sample(d time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			v := g.cur.Load()
			g.mu.Lock()
			g.sum += float64(v)
			g.samples++
			g.mu.Unlock()
		}
	}
}

func (g *gauge) reset() {
	g.mu.Lock()
	g.sum, g.samples = 0, 0
	g.mu.Unlock()
}

func (g *gauge) mean() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.samples == 0 {
		return math.NaN()
	}
	return g.sum / float64(g.samples)
}
