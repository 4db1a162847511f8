// Command billing runs the Best Practices article's scenario on the embedded default queue:
// a process initiator splits bursts of billing transactions into work
// messages, processing workers (adaptq's adaptive listener) compute each
// and put results on a results queue, and a process controller drains the
// results and aggregates them. It prints throughput, the pool size over
// time, and every billed queue call with its cost at the Best Practices article's price.
//
//	go run ./examples/billing            # the defaults: 3 bursts, 60,000 transactions
//	go run ./examples/billing -h         # the knobs
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/meter"
	_ "github.com/adaptq/adaptq/queue/sqlite" // the sqlite:// scheme both queues use
)

// Params shape a run.
type Params struct {
	// DB is the SQLite file holding both queues.
	DB string
	// Bursts of Transactions each arrive Gap apart (the Best Practices article: volumes from
	// thousands to hundreds of thousands per package).
	Bursts       int
	Transactions int
	Gap          time.Duration
	// PerMessage transactions travel in one work message (the Best Practices article: group
	// related items to save transactions).
	PerMessage int
	// Work is the computation per transaction, in rounds of a small hash.
	Work int
	// IdleMax is the listeners' longest idle sleep; short here so that the
	// pool visibly shrinks between bursts.
	IdleMax time.Duration
}

// DefaultParams finish in well under a minute on a laptop.
func DefaultParams() Params {
	return Params{
		DB:           filepath.Join("data", "billing.db"),
		Bursts:       3,
		Transactions: 20_000,
		Gap:          4 * time.Second,
		PerMessage:   10,
		Work:         200,
		IdleMax:      time.Second,
	}
}

// Transaction is one customer charge.
type Transaction struct {
	ID       int   `json:"id"`
	Customer int   `json:"customer"`
	Cents    int64 `json:"cents"`
}

// WorkItem is one work message: a slice of a burst.
type WorkItem struct {
	Burst int           `json:"burst"`
	Txns  []Transaction `json:"txns"`
}

// Result is what a processing worker reports for one work item.
type Result struct {
	Burst      int    `json:"burst"`
	Count      int    `json:"count"`
	Cents      int64  `json:"cents"`
	FeeCents   int64  `json:"fee_cents"`
	Checksum   int64  `json:"checksum"`
	WorkItemID string `json:"work_item_id"`
}

// Summary is what a run found.
type Summary struct {
	Transactions, WorkMessages, Results int
	Cents, FeeCents, Checksum           int64
	// Wall is from the worker's start until the last result was
	// aggregated; Settle the wait after it, for the pool to shrink back;
	// Total all of Run, setting up and shutting down included.
	Wall, Settle, Total time.Duration
	MaxTasks            int
	Timeline            []int // active processing tasks, sampled
	// MaxBacklog is the most work messages put and not yet processed at a
	// sample (counted here, no queue call): the pool grows only when the
	// producer outruns one task, which a busy machine can prevent.
	MaxBacklog int64
	Calls      meter.Snapshot
}

func main() {
	p := DefaultParams()
	flag.StringVar(&p.DB, "db", p.DB, "SQLite file for the queues")
	flag.IntVar(&p.Bursts, "bursts", p.Bursts, "number of bursts")
	flag.IntVar(&p.Transactions, "n", p.Transactions, "transactions per burst")
	flag.DurationVar(&p.Gap, "gap", p.Gap, "pause between bursts")
	flag.IntVar(&p.PerMessage, "per-message", p.PerMessage, "transactions per work message")
	flag.IntVar(&p.Work, "work", p.Work, "computation per transaction (hash rounds)")
	flag.DurationVar(&p.IdleMax, "idle-max", p.IdleMax, "longest idle sleep of a listener")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := Run(ctx, p, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "billing:", err)
		os.Exit(1)
	}
}

// fee is the "complex calculation" of the scenario: a fee from a few
// rounds of mixing, the same every time for the same transaction (so a
// redelivered message computes the same result).
func fee(t Transaction, rounds int) (int64, int64) {
	h := uint64(t.ID)*0x9E3779B97F4A7C15 ^ uint64(t.Customer)
	for i := 0; i < rounds; i++ {
		h ^= h >> 33
		h *= 0xff51afd7ed558ccd
		h ^= h >> 29
	}
	bps := int64(h%250) + 50 // 0.5 % to 3 %
	return t.Cents * bps / 10_000, int64(h % 1_000_003)
}

func transaction(burst, i int) Transaction {
	id := burst*10_000_000 + i
	return Transaction{ID: id, Customer: i % 997, Cents: int64(100 + (id*7919)%99_900)}
}

// Run runs the scenario and writes the report to out.
func Run(ctx context.Context, p Params, out io.Writer) (Summary, error) {
	begin := time.Now()
	var sum Summary
	if err := os.MkdirAll(filepath.Dir(p.DB), 0o755); err != nil {
		return sum, err
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(p.DB + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return sum, err
		}
	}
	workURL := "sqlite://" + p.DB + "?queue=billing-work"
	resultsURL := "sqlite://" + p.DB + "?queue=billing-results"

	cfg := adaptq.DefaultConfig()
	cfg.Admin.Address = "" // no endpoint for an example
	work := adaptq.DefaultQueueConfig()
	work.URL, work.Handler = workURL, "process"
	work.VisibilityTimeout = time.Minute
	// 32 handlers per task: one task then cannot hold a whole burst in flight
	// (with 256 it fetched all 300 messages of a burst on a busy machine, the
	// visible depth stayed under Pool.MessagesPerTask and the pool never grew).
	work.Concurrency = 32
	work.Idle.Max = p.IdleMax
	work.Pool.Max, work.Pool.MessagesPerTask, work.Pool.SampleInterval = 8, 64, 500*time.Millisecond
	results := adaptq.DefaultQueueConfig()
	results.URL, results.Handler = resultsURL, "aggregate"
	results.Idle.Max = p.IdleMax
	results.Pool.Max = 2
	cfg.Queues = []adaptq.QueueConfig{work, results}
	w, err := adaptq.New(cfg, adaptq.WithLogger(zap.NewNop()))
	if err != nil {
		return sum, err
	}

	// Processing worker: compute the burst slice, report the result.
	w.MustHandle("process", handler.JSON(func(ctx context.Context, it WorkItem) error {
		r := Result{Burst: it.Burst, Count: len(it.Txns), WorkItemID: fmt.Sprint(it.Burst, "/", it.Txns[0].ID)}
		for _, t := range it.Txns {
			f, c := fee(t, p.Work)
			r.Cents += t.Cents
			r.FeeCents += f
			r.Checksum = (r.Checksum + c) % 1_000_003
		}
		body, _ := json.Marshal(r)
		_, err := w.Put(ctx, "billing-results", body, queue.PutOptions{})
		return err
	}))
	// Process controller: aggregate, idempotently by work item (a result
	// can arrive twice if a worker's delete was lost).
	var mu sync.Mutex
	seen := map[string]bool{}
	var agg Summary
	w.MustHandle("aggregate", handler.JSON(func(_ context.Context, r Result) error {
		mu.Lock()
		defer mu.Unlock()
		if seen[r.WorkItemID] {
			return nil
		}
		seen[r.WorkItemID] = true
		agg.Results++
		agg.Transactions += r.Count
		agg.Cents += r.Cents
		agg.FeeCents += r.FeeCents
		agg.Checksum = (agg.Checksum + r.Checksum) % 1_000_003
		return nil
	}))

	runCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- w.Run(runCtx) }()

	// Sample the processing pool's size while the run goes on.
	var timeline []int
	var maxBacklog int64
	var puts atomic.Int64
	var tlMu sync.Mutex
	sampleStop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-sampleStop:
				return
			case <-tick.C:
				if l, ok := w.Listener("billing-work"); ok {
					tlMu.Lock()
					timeline = append(timeline, l.ActiveTasks())
					maxBacklog = max(maxBacklog, puts.Load()-l.Stats().Processed)
					tlMu.Unlock()
				}
			}
		}
	}()

	// Process initiator: bursts of transactions split into work messages.
	select {
	case <-w.Ready():
	case err := <-done:
		return sum, fmt.Errorf("worker did not start: %w", err)
	}
	workQ, err := w.Queue("billing-work")
	if err != nil {
		return sum, err
	}
	want := Summary{}
	for b := 0; b < p.Bursts; b++ {
		if b > 0 {
			select {
			case <-time.After(p.Gap):
			case <-ctx.Done():
				return sum, ctx.Err()
			}
		}
		fmt.Fprintf(out, "burst %d: %d transactions in %d work messages\n", b+1, p.Transactions, (p.Transactions+p.PerMessage-1)/p.PerMessage)
		if err := putBurst(ctx, workQ, b, p, &want, &puts); err != nil {
			return sum, err
		}
	}
	// Wait until the controller has every result.
	for {
		mu.Lock()
		n := agg.Transactions
		mu.Unlock()
		if n >= want.Transactions {
			break
		}
		select {
		case <-ctx.Done():
			return sum, ctx.Err()
		case err := <-done:
			return sum, fmt.Errorf("worker stopped early: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	wall := time.Since(start)
	// Let the pool shrink back before the report, as it would between bursts.
	time.Sleep(p.Gap)
	stats := w.Stats(ctx)
	close(sampleStop)
	<-sampled
	stopWorker()
	if err := <-done; err != nil {
		return sum, err
	}

	mu.Lock()
	sum = agg
	mu.Unlock()
	sum.Wall = wall
	sum.Settle = p.Gap
	sum.WorkMessages = want.WorkMessages
	tlMu.Lock()
	sum.Timeline = timeline
	sum.MaxBacklog = maxBacklog
	tlMu.Unlock()
	for _, n := range sum.Timeline {
		sum.MaxTasks = max(sum.MaxTasks, n)
	}
	var total meter.Snapshot
	for _, q := range stats.Queues {
		for k, v := range q.Calls {
			for _, kind := range meter.Kinds() {
				if kind.String() == k {
					total.Calls[kind] += v
				}
			}
		}
		total.MessagesDeleted += q.Deleted
	}
	total.PricePer10k = stats.PricePer10k
	sum.Calls = total
	if sum.Cents != want.Cents || sum.FeeCents != want.FeeCents || sum.Checksum != want.Checksum {
		return sum, fmt.Errorf("aggregate mismatch: got %d¢ / fees %d¢ / checksum %d, want %d¢ / %d¢ / %d",
			sum.Cents, sum.FeeCents, sum.Checksum, want.Cents, want.FeeCents, want.Checksum)
	}
	sum.Total = time.Since(begin)
	report(out, p, sum, stats)
	return sum, nil
}

// putBurst puts one burst's work messages from 8 producers, and adds what
// the controller should end up with to want.
func putBurst(ctx context.Context, q *queue.Queue, burst int, p Params, want *Summary, puts *atomic.Int64) error {
	var items [][]byte
	for i := 0; i < p.Transactions; i += p.PerMessage {
		it := WorkItem{Burst: burst}
		for j := i; j < min(i+p.PerMessage, p.Transactions); j++ {
			t := transaction(burst, j)
			it.Txns = append(it.Txns, t)
			f, c := fee(t, p.Work)
			want.Transactions++
			want.Cents += t.Cents
			want.FeeCents += f
			want.Checksum = (want.Checksum + c) % 1_000_003
		}
		body, err := json.Marshal(it)
		if err != nil {
			return err
		}
		items = append(items, body)
	}
	want.WorkMessages += len(items)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Go(func() {
			for i := g; i < len(items); i += 8 {
				if _, err := q.Put(ctx, items[i], queue.PutOptions{}); err != nil {
					errs <- err
					return
				}
				puts.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func report(out io.Writer, p Params, s Summary, st admin.Stats) {
	fmt.Fprintf(out, "\ndone: %d transactions in %d work messages, %d results aggregated\n", s.Transactions, s.WorkMessages, s.Results)
	fmt.Fprintf(out, "total %s, fees %s (checksum %d)\n", dollars(s.Cents), dollars(s.FeeCents), s.Checksum)
	busy := s.Wall - time.Duration(p.Bursts-1)*p.Gap
	fmt.Fprintf(out, "wall time %s, of which %s between bursts; %.0f transactions/s while busy\n",
		s.Wall.Round(time.Millisecond), time.Duration(p.Bursts-1)*p.Gap, float64(s.Transactions)/busy.Seconds())
	fmt.Fprintf(out, "the run took %s in all: the wall time, then %s letting the pool shrink back before this report, and %s opening and closing the queues (go run also builds the program first)\n",
		s.Total.Round(100*time.Millisecond), s.Settle, max(0, s.Total-s.Wall-s.Settle).Round(time.Millisecond))
	fmt.Fprintf(out, "processing pool (tasks, every 250 ms): %s\n", sparkline(s.Timeline))
	fmt.Fprintf(out, "pool grew to %d tasks and shrank back to %d\n", s.MaxTasks, lastOr(s.Timeline, 0))
	fmt.Fprintf(out, "\nqueue calls (each one billed):\n")
	kinds := meter.Kinds()
	sort.SliceStable(kinds, func(i, j int) bool { return s.Calls.Calls[kinds[i]] > s.Calls.Calls[kinds[j]] })
	for _, k := range kinds {
		if c := s.Calls.Calls[k]; c > 0 {
			fmt.Fprintf(out, "  %-12s %8d\n", k, c)
		}
	}
	fmt.Fprintf(out, "  %-12s %8d\n", "total", s.Calls.Total())
	fmt.Fprintf(out, "cost of these calls at $%.2f per 10,000: $%.4f\n", s.Calls.PricePer10k, s.Calls.Cost())
	// Idle, each queue's pool is one task polling once per idle.max.
	idlePerHour := float64(len(st.Queues)) * float64(time.Hour) / float64(p.IdleMax)
	fmt.Fprintf(out, "idle cost: one get per idle.max per queue, %.0f calls/hour here (idle.max %s to show the pool shrink);\n", idlePerHour, p.IdleMax)
	fmt.Fprintf(out, "  at the default idle.max of 1m that is %d/hour, $%.4f/month; with a push trigger %d/hour; the two-step dequeue post's loop: 3,600/hour per thread, $%.2f/month\n",
		2*60, meter.CostOf(2*60*meter.HoursPerMonth, s.Calls.PricePer10k), 2*12, meter.CostOf(3600*meter.HoursPerMonth, s.Calls.PricePer10k))
	perMsg := float64(s.Calls.Total()) / math.Max(1, float64(s.Calls.MessagesDeleted))
	fmt.Fprintf(out, "calls per message: %.3f, put included (the two-step dequeue post's loop makes 3: put, get, delete; plus a get a second per thread while idle)\n", perMsg)
}

func dollars(c int64) string { return fmt.Sprintf("$%d.%02d", c/100, c%100) }

func lastOr(xs []int, d int) int {
	if len(xs) == 0 {
		return d
	}
	return xs[len(xs)-1]
}

// sparkline draws pool sizes as a compact row of numbers, collapsing runs.
func sparkline(xs []int) string {
	var b strings.Builder
	for i := 0; i < len(xs); {
		j := i
		for j < len(xs) && xs[j] == xs[i] {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(" ")
		}
		if j-i > 1 {
			fmt.Fprintf(&b, "%d×%d", xs[i], j-i)
		} else {
			fmt.Fprintf(&b, "%d", xs[i])
		}
		i = j
	}
	return b.String()
}
