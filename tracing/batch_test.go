package tracing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/tracing"
)

// A batch handler's call is one span linked to each message's producer
// span; a message's failure and poisoning are events naming it.
func TestBatchCallLinksEveryProducer(t *testing.T) {
	t.Parallel()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	tr := tracing.New(tracing.WithTracerProvider(tp), tracing.WithPropagator(propagation.TraceContext{}))
	q, err := memory.NewStore().Queue("orders", tr.QueueOption())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, body := range []string{"A1", "A2"} {
		if _, err := q.Put(ctx, []byte(body), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := q.Get(ctx, 2, time.Minute)
	if err != nil || len(ms) != 2 {
		t.Fatalf("get: %d, %v", len(ms), err)
	}
	bt, ok := tr.Listener(q).(listener.BatchTracer)
	if !ok {
		t.Fatal("the listener tracer follows no batch calls")
	}
	hctx, span := bt.StartBatch(ctx, ms)
	span.Message(0).End(nil)
	span.Message(1).Poisoned("permanent failure", "p1")
	span.Message(1).End(errors.New("no such sku"))
	span.End()

	var producers []trace.SpanContext
	for _, s := range spans(sr, "send orders") {
		producers = append(producers, s.SpanContext())
	}
	calls := spans(sr, "process orders")
	if len(producers) != 2 || len(calls) != 1 {
		t.Fatalf("%d producer and %d call spans, want 2 and 1", len(producers), len(calls))
	}
	c := calls[0]
	if !trace.SpanContextFromContext(hctx).Equal(c.SpanContext()) {
		t.Error("the call's context does not carry its span")
	}
	same := func(a, b trace.SpanContext) bool { return a.TraceID() == b.TraceID() && a.SpanID() == b.SpanID() }
	if len(c.Links()) != 2 || !same(c.Links()[0].SpanContext, producers[0]) || !same(c.Links()[1].SpanContext, producers[1]) {
		t.Errorf("links %v, want the producers %v", c.Links(), producers)
	}
	if v, _ := attr(c, "messaging.batch.message_count"); v.AsInt64() != 2 {
		t.Errorf("batch message count %d", v.AsInt64())
	}
	if c.Status().Code != codes.Error || c.Status().Description != "1 of 2 messages failed" {
		t.Errorf("status %+v", c.Status())
	}
	var named int
	for _, e := range c.Events() {
		for _, a := range e.Attributes {
			if a.Key == "messaging.message.id" && a.Value.AsString() == ms[1].ID {
				named++
			}
		}
	}
	if !hasEvent(c, tracing.EventPoisoned) || !hasEvent(c, "exception") || named != 2 {
		t.Errorf("events %v: want a poisoning and an exception naming message %s", c.Events(), ms[1].ID)
	}
}
