package tracing_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"syscall"
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

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// drain puts n messages (not timed) and times a listener with tasks
// tasks draining them, with handler work per message: it returns the
// messages per second of wall time and the CPU time (user and system,
// the whole process: the SDK's batching goroutine included) per message.
func drain(b *testing.B, m tracingMode, n, tasks int, work time.Duration) (rate float64, cpu time.Duration) {
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
	cpu0 := cpuTime()
	start := time.Now()
	if err := l.Start(lctx, tasks); err != nil {
		b.Fatal(err)
	}
	for l.Stats().Deleted < int64(n) {
		time.Sleep(200 * time.Microsecond)
	}
	rate = float64(n) / time.Since(start).Seconds()
	cpu = (cpuTime() - cpu0) / time.Duration(n)
	cancel()
	if err := l.Wait(); err != nil {
		b.Fatal(err)
	}
	return rate, cpu
}

// BenchmarkTracingOverhead drains the same backlog with tracing off, with
// package tracing on OpenTelemetry's no-op globals, and with the SDK
// (every span sampled, batched to an exporter that drops them), the modes
// alternating, ADAPTQ_BENCH_RUNS runs each (default 5), and reports each
// mode's median throughput and CPU time per message and their ratios to
// off: 30,000 messages a run
// with a no-op handler, 10,000 with a handler that works 20 µs (a busy
// loop: CPU, as a small decode-and-compute handler). Run it once:
//
//	go test -run '^$' -bench TracingOverhead -benchtime 1x ./tracing/
func BenchmarkTracingOverhead(b *testing.B) {
	runs := 5
	if v, err := strconv.Atoi(os.Getenv("ADAPTQ_BENCH_RUNS")); err == nil && v > 0 {
		runs = v
	}
	for _, c := range []struct {
		tasks, n int
		work     time.Duration
	}{{1, 30_000, 0}, {4, 30_000, 0}, {1, 10_000, 20 * time.Microsecond}} {
		b.Run(fmt.Sprintf("tasks=%d/work=%s", c.tasks, c.work), func(b *testing.B) {
			rates := make([][]float64, len(tracingModes))
			cpus := make([][]float64, len(tracingModes))
			for range runs {
				for i, m := range tracingModes {
					r, cpu := drain(b, m, c.n, c.tasks, c.work)
					rates[i] = append(rates[i], r)
					cpus[i] = append(cpus[i], float64(cpu))
				}
			}
			median := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
			off, offCPU := median(rates[0]), median(cpus[0])
			b.ReportMetric(off, "off_msgs/s")
			b.ReportMetric(offCPU, "off_cpu-ns/msg")
			for i, m := range tracingModes[1:] {
				r, cpu := median(rates[i+1]), median(cpus[i+1])
				b.ReportMetric(r, m.name+"_msgs/s")
				b.ReportMetric(r/off, m.name+"/off")
				b.ReportMetric(cpu, m.name+"_cpu-ns/msg")
				// Throughput by CPU: what the ratio is on a machine whose
				// cores are the listener's alone.
				b.ReportMetric(offCPU/cpu, m.name+"/off_by_cpu")
			}
		})
	}
}

// BenchmarkSpanCost is the cost of one consumer span alone (Start and End,
// with the SDK as in BenchmarkTracingOverhead's sdk mode, a parent in the
// message's metadata), and of the idle check with nothing configured.
func BenchmarkSpanCost(b *testing.B) {
	m := &queue.Message{ID: "1", Body: []byte("a small message body"), DequeueCount: 1,
		Metadata: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	q, err := memory.NewStore().Queue("bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("sdk", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		tr := tracing.New(tracing.WithTracerProvider(tp), tracing.WithPropagator(propagation.TraceContext{})).Listener(q)
		b.ReportAllocs()
		for b.Loop() {
			_, s := tr.Start(context.Background(), m)
			s.End(nil)
		}
	})
	b.Run("unconfigured", func(b *testing.B) {
		tr := tracing.New().Listener(q)
		b.ReportAllocs()
		for b.Loop() {
			if _, s := tr.Start(context.Background(), m); s != nil {
				b.Fatal("a span with nothing configured")
			}
		}
	})
}
