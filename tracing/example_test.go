package tracing_test

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/tracing"
)

// A put and the handling of its message are one trace: the consumer span
// is the producer span's child, and the handler's context carries it. (A
// program usually imports the package and sets OpenTelemetry's globals
// instead of passing a provider.)
func Example() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	tr := tracing.New(tracing.WithTracerProvider(tp), tracing.WithPropagator(propagation.TraceContext{}))

	ctx := context.Background()
	q, _ := memory.NewStore().Queue("orders", tr.QueueOption())
	_, _ = q.Put(ctx, []byte(`{"id":"A1"}`), queue.PutOptions{})

	// What a listener does for each message (listener.Options.Tracer).
	ms, _ := q.Get(ctx, 1, time.Minute)
	hctx, span := tr.Listener(q).Start(ctx, ms[0])
	fmt.Println("metadata keys:", len(ms[0].Metadata), "traceparent set:", ms[0].Metadata["traceparent"] != "")
	span.End(nil)

	send, process := spans.Ended()[0], spans.Ended()[1]
	fmt.Println(send.Name(), send.SpanKind())
	fmt.Println(process.Name(), process.SpanKind())
	fmt.Println("child of the put:", process.Parent().SpanID() == send.SpanContext().SpanID())
	fmt.Println("handler's context:", trace.SpanContextFromContext(hctx).SpanID() == process.SpanContext().SpanID())
	// Output:
	// metadata keys: 1 traceparent set: true
	// send orders producer
	// process orders consumer
	// child of the put: true
	// handler's context: true
}
