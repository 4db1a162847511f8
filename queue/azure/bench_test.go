package azure_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/scaling"
)

// benchMessages is how many messages each drain starts with. Azurite's
// cost per request grows with the messages in the account, so every
// consumer drains the same depth.
const benchMessages = 2000

// benchWorkers is the concurrency of the listener and the hand-written
// loop.
const benchWorkers = 16

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }

func noop(context.Context, *queue.Message) error { return nil }

// naiveLoop is the two-step dequeue post's worker loop: get one message, process it,
// delete it, and sleep a second when the queue is empty. It returns at
// the first empty get (a real one would sleep and poll forever).
func naiveLoop(ctx context.Context, q *queue.Queue) error {
	for {
		ms, err := q.Get(ctx, 1, time.Minute)
		if err != nil {
			return err
		}
		if len(ms) == 0 {
			return nil // Thread.Sleep(1000) in the two-step dequeue post
		}
		if err := noop(ctx, ms[0]); err == nil {
			if err := q.Delete(ctx, ms[0].ID, ms[0].PopReceipt); err != nil {
				return err
			}
		}
	}
}

// handWritten is what a careful programmer writes without the listener:
// benchWorkers goroutines, each getting 32, handling them inline and
// deleting them in parallel.
func handWritten(ctx context.Context, q *queue.Queue) error {
	g, ctx := errgroup.WithContext(ctx)
	for range benchWorkers {
		g.Go(func() error {
			for {
				ms, err := q.Get(ctx, queue.MaxBatchSize, time.Minute)
				if err != nil {
					return err
				}
				if len(ms) == 0 {
					return nil
				}
				var dg errgroup.Group
				for _, m := range ms {
					if noop(ctx, m) == nil {
						dg.Go(func() error { return q.Delete(ctx, m.ID, m.PopReceipt) })
					}
				}
				if err := dg.Wait(); err != nil {
					return err
				}
			}
		})
	}
	return g.Wait()
}

// listenerDrain drains n messages with the adaptive listener at the same
// concurrency: benchWorkers tasks getting 32.
func listenerDrain(ctx context.Context, q *queue.Queue, n int) error {
	l, err := listener.New(q, noop, listener.Options{
		Tasks: benchWorkers, MinTasks: benchWorkers, MaxTasks: benchWorkers,
		Concurrency: 2 * benchWorkers * queue.MaxBatchSize,
		Idle:        scaling.IdleBackoff{Min: time.Millisecond, Max: 100 * time.Millisecond, Delta: 5 * time.Millisecond},
	})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	if err := l.Start(rctx, benchWorkers); err != nil {
		cancel()
		return err
	}
	for l.Stats().Deleted < int64(n) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	return l.Wait()
}

// consumer is one way of draining a queue in the benchmarks.
type consumer struct {
	name  string
	drain func(ctx context.Context, q *queue.Queue, n int) error
}

var (
	naiveConsumer       = consumer{"naive", func(ctx context.Context, q *queue.Queue, _ int) error { return naiveLoop(ctx, q) }}
	handWrittenConsumer = consumer{"handwritten", func(ctx context.Context, q *queue.Queue, _ int) error { return handWritten(ctx, q) }}
	listenerConsumer    = consumer{"listener", listenerDrain}
)

// BenchmarkDrain compares, on Azurite in one run, how fast three consumers
// drain the same 2,000 messages with a no-op handler: the two-step dequeue post's naive
// loop (one worker: get 1, delete, sleep 1 s when empty), the hand-written
// loop (16 goroutines getting 32 and deleting in parallel) and the
// listener (16 tasks getting 32). Each round drains once with each, in
// rotating order, so that drift in Azurite or in the machine's load
// touches all three alike; the metrics are each consumer's messages per
// second over all rounds, its billed calls per message, and the listener's
// ratios to the others. Azurite, one Node process, is the bottleneck.
//
//	go test -run '^$' -bench 'Drain$' -benchtime 5x ./queue/azure/
func BenchmarkDrain(b *testing.B) {
	srv := azuritetest.Shared(b)
	acct := newAccount(b, srv, azure.Config{})
	compareDrains(b, acct, acct, benchMessages, naiveConsumer, handWrittenConsumer, listenerConsumer)
}

// BenchmarkDrainLatency is BenchmarkDrain's listener and hand-written loop
// (1,000 messages) with 30 ms added to every request by a proxy, as a far
// datacenter would: the round trip, more than Azurite, bounds each worker.
//
//	go test -run '^$' -bench 'DrainLatency' -benchtime 3x ./queue/azure/
func BenchmarkDrainLatency(b *testing.B) {
	const latency = 30 * time.Millisecond
	srv := azuritetest.Shared(b)
	p := newFaultProxy(b, srv.QueueEndpoint)
	p.SetDelay(latency)
	direct := newAccount(b, srv, azure.Config{})
	far := newAccount(b, srv, azure.Config{QueueEndpoint: proxyEndpoint(p)})
	compareDrains(b, direct, far, benchMessages/2, handWrittenConsumer, listenerConsumer)
}

// compareDrains fills n messages through fillAcct and drains them through
// drainAcct with each consumer, once per round in rotating order, and
// reports each one's rate and the listener's ratio to the others.
func compareDrains(b *testing.B, fillAcct, drainAcct *azure.Account, n int, consumers ...consumer) {
	fills := make([]*queue.Queue, len(consumers))
	queues := make([]*queue.Queue, len(consumers))
	meters := make([]*meter.Meter, len(consumers))
	for i, c := range consumers {
		name := "bench-drain-" + c.name
		fills[i] = openQueue(b, fillAcct, name)
		if err := fills[i].Clear(ctx); err != nil {
			b.Fatal(err)
		}
		meters[i] = meter.New(0)
		queues[i] = openQueue(b, drainAcct, name, queue.WithObserver(meters[i]))
	}
	took := make([]time.Duration, len(consumers))
	b.ResetTimer()
	for round := range b.N {
		for k := range consumers {
			i := (round + k) % len(consumers)
			c := consumers[i]
			b.StopTimer()
			fill(b, fills[i], n)
			before := meters[i].Snapshot()
			b.StartTimer()
			start := time.Now()
			if err := c.drain(ctx, queues[i], n); err != nil {
				b.Fatalf("%s: %v", c.name, err)
			}
			took[i] += time.Since(start)
			b.StopTimer()
			if s := meters[i].Snapshot().Sub(before); s.MessagesDeleted != int64(n) {
				b.Fatalf("%s deleted %d of %d", c.name, s.MessagesDeleted, n)
			}
		}
	}
	rate := map[string]float64{}
	for i, c := range consumers {
		rate[c.name] = float64(b.N*n) / took[i].Seconds()
		b.ReportMetric(rate[c.name], c.name+"_msgs/s")
		s := meters[i].Snapshot()
		b.ReportMetric(float64(s.Total())/float64(s.MessagesDeleted), c.name+"_calls/msg")
	}
	for _, other := range []string{"handwritten", "naive"} {
		if r, ok := rate[other]; ok {
			b.ReportMetric(rate["listener"]/r, "listener/"+other)
		}
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkPut measures the raw put rate on Azurite: 16 producers putting
// small messages. One op is one message.
//
//	go test -run '^$' -bench Put -benchtime 4000x ./queue/azure/
func BenchmarkPut(b *testing.B) {
	srv := azuritetest.Shared(b)
	acct := newAccount(b, srv, azure.Config{})
	q := openQueue(b, acct, "bench-put")
	if err := q.Clear(ctx); err != nil {
		b.Fatal(err)
	}
	body := []byte("a small message body of about fifty bytes .......")
	b.SetParallelism(benchWorkers / max(1, runtimeProcs()))
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
	b.StopTimer()
	if err := q.Clear(ctx); err != nil {
		b.Fatal(err)
	}
}
