package tracing_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/tracing"
)

// discard is an exporter that drops every span: the SDK does all its work
// (sampling, recording, batching) and nothing leaves the process.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// tracingMode is one side of the comparison.
type tracingMode struct {
	name string
	// setup returns the queue and listener options of the mode, and a
	// func that ends it.
	setup func() ([]queue.Option, listener.Options, func())
}

var tracingModes = []tracingMode{
	{"off", func() ([]queue.Option, listener.Options, func()) {
		return []queue.Option{queue.WithTracer(nil)}, listener.Options{NoTracer: true}, func() {}
	}},
	{"noop", func() ([]queue.Option, listener.Options, func()) {
		// Package tracing imported, OpenTelemetry not configured: the
		// global no-op provider and propagator.
		return nil, listener.Options{}, func() {}
	}},
	{"sdk", func() ([]queue.Option, listener.Options, func()) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
		tracing.Register(tracing.New(tracing.WithTracerProvider(tp), tracing.WithPropagator(propagation.TraceContext{})))
		return nil, listener.Options{}, func() {
			_ = tp.Shutdown(context.Background())
			tracing.Register(tracing.New())
		}
	}},
}

// drain puts n messages (not timed) and times a listener with tasks
// tasks draining them, with handler work per message.
func drain(b *testing.B, m tracingMode, n, tasks int, work time.Duration) float64 {
	qopts, lo, end := m.setup()
	defer end()
	q, err := memory.NewStore().Queue("bench", qopts...)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	body := []byte("a small message body of about fifty bytes .......")
	for range n {
		if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	h := func(context.Context, *queue.Message) error {
		for t := time.Now(); time.Since(t) < work; {
		}
		return nil
	}
	lo.Tasks, lo.Concurrency = tasks, tasks*48
	l, err := listener.New(q, h, lo)
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	lctx, cancel := context.WithCancel(ctx)
	start := time.Now()
	if err := l.Start(lctx, tasks); err != nil {
		b.Fatal(err)
	}
	for l.Stats().Deleted < int64(n) {
		time.Sleep(200 * time.Microsecond)
	}
	rate := float64(n) / time.Since(start).Seconds()
	cancel()
	if err := l.Wait(); err != nil {
		b.Fatal(err)
	}
	return rate
}

// BenchmarkTracingOverhead drains the same backlog with tracing off, with
// package tracing on OpenTelemetry's no-op globals, and with the SDK
// (every span sampled, batched to an exporter that drops them), the modes
// alternating, ADAPTQ_BENCH_RUNS runs each (default 5), and reports each
// mode's median throughput and its ratio to off. Run it once:
//
//	go test -run '^$' -bench TracingOverhead -benchtime 1x ./tracing/
func BenchmarkTracingOverhead(b *testing.B) {
	runs := 5
	if v, err := strconv.Atoi(os.Getenv("ADAPTQ_BENCH_RUNS")); err == nil && v > 0 {
		runs = v
	}
	const n = 100_000
	for _, c := range []struct {
		tasks int
		work  time.Duration
	}{{1, 0}, {4, 0}, {1, 20 * time.Microsecond}} {
		b.Run(fmt.Sprintf("tasks=%d/work=%s", c.tasks, c.work), func(b *testing.B) {
			rates := make([][]float64, len(tracingModes))
			for range runs {
				for i, m := range tracingModes {
					rates[i] = append(rates[i], drain(b, m, n, c.tasks, c.work))
				}
			}
			median := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
			off := median(rates[0])
			b.ReportMetric(off, "off_msgs/s")
			for i, m := range tracingModes[1:] {
				r := median(rates[i+1])
				b.ReportMetric(r, m.name+"_msgs/s")
				b.ReportMetric(r/off, m.name+"/off")
			}
		})
	}
}
