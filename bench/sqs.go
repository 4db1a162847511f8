package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/queue/sqs"
	"github.com/adaptq/adaptq/queue/sqs/sqstest"
)

// SQS targets.
const (
	// SQSCallsTarget: the listener's billed calls per message at
	// saturation, the put included: put 1 + receive 1/10 + batch delete
	// 1/10 is 1.2, and the tail's empty receives must stay under 0.05.
	SQSCallsTarget = 1.25
	// SQSIdleTarget: an idle task's calls an hour, without a trigger: one
	// 20 s long poll after another.
	SQSIdleTarget = 180
)

const (
	// sqsWorkers is the concurrency of the listener and the hand-written
	// loop: 16 workers receiving 10 (SQS's largest receive).
	sqsWorkers = 16
	// sqsFillProducers put each backlog.
	sqsFillProducers = 16
	// sqsDrainLimit fails a drain that stalls.
	sqsDrainLimit = 5 * time.Minute
	// sqsListenerConcurrency: two full batches per task.
	sqsListenerConcurrency = 2 * sqsWorkers * sqs.MaxBatch
)

type sqsConsumer struct {
	key, what string
	drain     func(ctx context.Context, q *queue.Queue, n int) (time.Duration, error)
}

var (
	sqsHand = sqsConsumer{"handwritten", fmt.Sprintf("hand-written loop: %d goroutines, receive 10 → no-op → one DeleteMessageBatch of 10", sqsWorkers), sqsHandWrittenDrain}
	sqsLis  = sqsConsumer{"listener", fmt.Sprintf("listener: %d tasks, receive 10 (Features().MaxBatch), concurrency %d, other options default", sqsWorkers, sqsListenerConcurrency), sqsListenerDrain}
)

// sqsHandWrittenDrain is what a careful programmer writes for SQS without
// the listener: sqsWorkers goroutines, each receiving 10, handling them
// inline and deleting them with one batch call, until a receive comes
// back empty.
func sqsHandWrittenDrain(ctx context.Context, q *queue.Queue, n int) (time.Duration, error) {
	var done, took atomic.Int64
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	for range sqsWorkers {
		g.Go(func() error {
			rs := make([]queue.Receipt, 0, sqs.MaxBatch)
			for {
				ms, err := q.Get(gctx, sqs.MaxBatch, time.Minute)
				if err != nil {
					return err
				}
				if len(ms) == 0 {
					return nil
				}
				rs = rs[:0]
				for _, m := range ms {
					if noop(gctx, m) == nil {
						rs = append(rs, queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
					}
				}
				res, err := q.DeleteBatch(gctx, rs)
				if err != nil {
					return err
				}
				for _, r := range res {
					if r != nil {
						return r
					}
					if done.Add(1) == int64(n) {
						took.Store(int64(time.Since(start)))
					}
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	if done.Load() != int64(n) {
		return 0, fmt.Errorf("deleted %d of %d", done.Load(), n)
	}
	return time.Duration(took.Load()), nil
}

func sqsListenerOptions() listener.Options {
	return listener.Options{
		Tasks: sqsWorkers, MinTasks: sqsWorkers, MaxTasks: sqsWorkers,
		Concurrency: sqsListenerConcurrency,
	}
}

func sqsListenerDrain(ctx context.Context, q *queue.Queue, n int) (time.Duration, error) {
	d, _, err := drainListener(ctx, q, n, noop, sqsListenerOptions(), sqsDrainLimit)
	return d, err
}

// getTimes records when each get of a queue returned (a queue.Observer).
type getTimes struct {
	mu sync.Mutex
	at []time.Time
}

func (g *getTimes) Observe(c queue.Call) {
	if c.Op == queue.OpGet && !c.Rejected {
		g.mu.Lock()
		g.at = append(g.at, time.Now())
		g.mu.Unlock()
	}
}

var errNoFauxqs = errors.New("the SQS section needs fauxqs: run `make test` (or `make bench`) once from the repository root " +
	"(it installs the pinned fauxqs into tools/fauxqs with npm ci), then run the benchmarks again")

func sqsSection(ctx context.Context, e *Env, s *Section) error {
	n, rounds, idleFor := e.Sizes.SQS, e.Sizes.SQSRounds, e.Sizes.SQSIdle
	s.how("adaptq's SQS driver (`queue/sqs`) against fauxqs %s, an SQS emulator (one Node process, all in memory), "+
		"started as the driver's tests start it (`sqstest`: bound to a free loopback port); %d-byte messages, a no-op "+
		"handler. Two consumers drain the same backlog of %s messages, each from a queue of its own, put by %d producers "+
		"just before each drain: the **hand-written loop** (%d goroutines, each receiving 10, handling them inline and "+
		"deleting them with one DeleteMessageBatch) and the **listener** at the same concurrency. Each is timed from its "+
		"start to its %s-th delete; in each of %d round%s both drain once, in rotating order. A cost meter counts every "+
		"call of each consumer's queue, **puts included**, so calls per message are what SQS would bill for a message's "+
		"whole life (the driver makes one request per call; these bodies are far under the 64 KiB that SQS bills as "+
		"one request).", sqstest.Version, len(smallBody), commas(int64(n)), sqsFillProducers, sqsWorkers,
		commas(int64(n)), rounds, plural(rounds))
	s.how("**Idle**: one listener task with the default idle backoff on an empty queue, watched for %s; its idle waits "+
		"are long polls (a ReceiveMessage held open up to 20 s, returning the moment a message arrives), so its calls "+
		"an hour are 3,600 s over the steady gap between its receives (the median of the last half of the gaps).", idleFor)

	srv, err := sqstest.Launch()
	if err != nil {
		return fmt.Errorf("%w: %v", errNoFauxqs, err)
	}
	defer srv.Stop()
	e.logf("sqs: fauxqs %s on %s (pid %d)", sqstest.Version, srv.Endpoint, srv.PID())
	c, err := sqs.NewClient(ctx, sqs.Config{Region: sqstest.NewRegion(), Account: sqstest.Account, Endpoint: srv.Endpoint})
	if err != nil {
		return err
	}
	defer c.Close()

	type series struct {
		c        sqsConsumer
		m        *meter.Meter
		q        *queue.Queue
		took     []time.Duration
		messages int
	}
	var ss []*series
	for _, sc := range []sqsConsumer{sqsHand, sqsLis} {
		m := meter.New(sqs.PricePer10k)
		q, err := c.Queue(ctx, "bench-"+sc.key, queue.WithObserver(m))
		if err != nil {
			return err
		}
		defer q.Close()
		ss = append(ss, &series{c: sc, m: m, q: q})
	}
	var putWall time.Duration
	puts := 0
	for r := 0; r < rounds; r++ {
		for k := range ss {
			sr := ss[(r+k)%len(ss)]
			t0 := time.Now()
			if err := fillParallel(ctx, sr.q, n, sqsFillProducers, smallBody); err != nil {
				return fmt.Errorf("%s: %w", sr.c.key, err)
			}
			putWall += time.Since(t0)
			puts += n
			before := sr.m.Snapshot()
			took, err := sr.c.drain(ctx, sr.q, n)
			if err != nil {
				return fmt.Errorf("%s: %w", sr.c.key, err)
			}
			if d := sr.m.Snapshot().Sub(before); d.MessagesDeleted != int64(n) {
				return fmt.Errorf("%s deleted %d of %d", sr.c.key, d.MessagesDeleted, n)
			}
			sr.took = append(sr.took, took)
			sr.messages += n
			e.logf("sqs: %s: %s", sr.c.key, perSec(rate(n, took)))
		}
	}
	rateOf := func(sr *series) float64 {
		var t time.Duration
		for _, d := range sr.took {
			t += d
		}
		return rate(sr.messages, t)
	}
	hand, lis := ss[0], ss[1]
	s.add(Row{
		What:   fmt.Sprintf("Put, %d producers (the backlogs put before each drain)", sqsFillProducers),
		Figure: perSec(rate(puts, putWall)),
		Note:   fmt.Sprintf("%s messages in all", commas(int64(puts))),
	})
	for _, sr := range ss {
		cs := sr.m.Snapshot()
		s.add(Row{What: sr.c.what, Figure: perSec(rateOf(sr)),
			Note: fmt.Sprintf("%.3f calls/message, put included (%s)", cs.CallsPerMessage(), breakdown(cs))})
	}
	x := rateOf(lis) / rateOf(hand)
	s.add(Row{What: "listener ÷ hand-written loop", Figure: fmt.Sprintf("%.2f", x),
		Target: fmt.Sprintf("≥ %.2f", AzureHandWrittenTarget), Holds: verdict(x >= AzureHandWrittenTarget),
		Note: sqsRatioNote(x)})
	ls := lis.m.Snapshot()
	cpm := ls.CallsPerMessage()
	cr := Row{
		What:   "listener's calls per message at saturation: put + receive/10 + batch delete/10",
		Figure: fmt.Sprintf("%.3f calls/message", cpm),
		Target: fmt.Sprintf("≤ %.2f", SQSCallsTarget),
		Holds:  verdict(cpm <= SQSCallsTarget),
		Note: fmt.Sprintf("%s over %d drains, counted until each listener had shut down (%.1f empty receives per drain, "+
			"the %d tasks' as the queue ran dry); the floor is 1.2; at $0.40 per million requests, $%.2f per million messages",
			breakdown(ls), len(lis.took), float64(ls.Calls[meter.GetEmpty])/float64(len(lis.took)), sqsWorkers,
			cpm*sqs.PricePer10k*100),
	}
	if cpm > SQSCallsTarget {
		cr.Note = "missed: " + cr.Note
	}
	s.add(cr)

	// Idle: one task on an empty queue.
	gt := &getTimes{}
	im := meter.New(sqs.PricePer10k)
	iq, err := c.Queue(ctx, "bench-idle", queue.WithObserver(im), queue.WithObserver(gt))
	if err != nil {
		return err
	}
	defer iq.Close()
	l, err := listener.New(iq, noop, listener.Options{Tasks: 1, MinTasks: 1, MaxTasks: 1})
	if err != nil {
		return err
	}
	ictx, cancel := context.WithTimeout(ctx, idleFor)
	start := time.Now()
	err = l.Run(ictx)
	cancel()
	if err != nil {
		return err
	}
	gt.mu.Lock()
	at := slices.Clone(gt.at)
	gt.mu.Unlock()
	var gaps []time.Duration
	prev := start
	for _, t := range at {
		gaps = append(gaps, t.Sub(prev))
		prev = t
	}
	is := im.Snapshot()
	row := Row{What: "an idle listener task (default idle backoff, no trigger): calls an hour", Target: fmt.Sprintf("≤ %d", SQSIdleTarget)}
	if len(gaps) >= 2 {
		tail := slices.Clone(gaps[len(gaps)/2:])
		slices.Sort(tail)
		gap := tail[len(tail)/2]
		perHour := time.Hour.Seconds() / gap.Seconds()
		row.Figure = fmt.Sprintf("%.0f calls/hour", perHour)
		row.Holds = verdict(perHour <= SQSIdleTarget*1.02) // the gap is 20 s plus a request's round trip
		row.Note = fmt.Sprintf("%d receives in %s (%d of them empty, the first few short as the idle backoff grew past 1 s), "+
			"the steady gap %s: each idle wait is one long poll", len(at), idleFor, is.Calls[meter.GetEmpty], gap.Round(10*time.Millisecond))
	} else {
		row.Figure = fmt.Sprintf("%d receives in %s", len(at), idleFor)
		row.Holds = NoTarget
		row.Note = "too short a watch to see the steady gap (-sqs-idle)"
	}
	s.add(row)
	s.note("fauxqs is an emulator: its rates say how well the listener spends one JavaScript thread's capacity against a " +
		"hand-written loop, not what SQS itself would give (SQS scales out; there, round trips bound each worker). " +
		"The calls per message are what SQS bills, whatever the rate.")
	return nil
}

// sqsRatioNote explains the listener's rate against the hand-written
// loop's.
func sqsRatioNote(x float64) string {
	switch {
	case x > 1.05:
		return "the same 16 workers receiving 10; each listener task fetches its next batch while the last one's batch " +
			"delete is on its way (Functions' new-batch threshold), where a hand-written worker waits for its delete " +
			"before it receives again"
	case x >= AzureHandWrittenTarget:
		return "the same 16 workers receiving 10: the listener keeps pace"
	}
	return fmt.Sprintf("missed: the listener falls %.0f%% behind the same 16 workers receiving 10", 100*(1-x))
}
