package tracing_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/adaptq/adaptq/handler"
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

// A message put again with the metadata it had (a requeue from the poison
// queue) stays in its trace: the new put's span is the child of the
// context the metadata carries, and the metadata then carries the new one.
func TestPutAgainContinuesTheTrace(t *testing.T) {
	t.Parallel()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	tr := tracing.New(tracing.WithTracerProvider(tp), tracing.WithPropagator(propagation.TraceContext{}))
	q, err := memory.NewStore().Queue("orders", tr.QueueOption())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const old = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if _, err := q.Put(ctx, []byte("A1"), queue.PutOptions{Metadata: map[string]string{"traceparent": old, "tenant": "a"}}); err != nil {
		t.Fatal(err)
	}
	send := spans(sr, "send orders")
	if len(send) != 1 || send[0].Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || send[0].Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("send spans %v, want one, child of the metadata's context", send)
	}
	ms, err := q.Peek(ctx, 1)
	if err != nil || len(ms) != 1 {
		t.Fatalf("peek: %d, %v", len(ms), err)
	}
	sc := send[0].SpanContext()
	if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; ms[0].Metadata["traceparent"] != want || ms[0].Metadata["tenant"] != "a" {
		t.Errorf("metadata %v, want traceparent %s and the tenant", ms[0].Metadata, want)
	}
}

// A put never fails for tracing's sake: where the trace context would
// break the backend's metadata limits, the message goes without it.
func TestTraceContextOnlyWhereItFits(t *testing.T) {
	t.Parallel()
	tp := sdktrace.NewTracerProvider()
	tr := tracing.New(tracing.WithTracerProvider(tp), tracing.WithPropagator(propagation.TraceContext{}))
	q, err := memory.NewStore().Queue("orders", tr.QueueOption())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	max := q.Features().Metadata.MaxPairs
	for _, n := range []int{max - 1, max} {
		md := map[string]string{}
		for i := range n {
			md[fmt.Sprintf("k%d", i)] = "v"
		}
		if _, err := q.Put(ctx, []byte("A1"), queue.PutOptions{Metadata: md}); err != nil {
			t.Fatalf("%d pairs: %v", n, err)
		}
		ms, err := q.Get(ctx, 1, time.Minute)
		if err != nil || len(ms) != 1 {
			t.Fatalf("get: %d, %v", len(ms), err)
		}
		_, traced := ms[0].Metadata["traceparent"]
		if want := n < max; traced != want || len(ms[0].Metadata) != n+map[bool]int{true: 1}[traced] {
			t.Errorf("%d pairs of %d: traceparent %v (want %v), %d pairs stored", n, max, traced, want, len(ms[0].Metadata))
		}
		if err := q.Delete(ctx, ms[0].ID, ms[0].PopReceipt); err != nil {
			t.Fatal(err)
		}
	}
}

// A batch handler's call, run by the listener, is one span linked to the
// messages' producers; a message it fails permanently is poisoned, and
// the call's span says so.
func TestListenerBatchCallIsOneSpan(t *testing.T) {
	t.Parallel()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	tr := tracing.New(tracing.WithTracerProvider(tp), tracing.WithPropagator(propagation.TraceContext{}))
	store := memory.NewStore()
	q, err := store.Queue("orders", tr.QueueOption())
	if err != nil {
		t.Fatal(err)
	}
	poisonQ, err := store.Queue("orders-poison", tr.QueueOption())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var ids []string
	for _, body := range []string{"A1", "bad", "A3"} {
		id, err := q.Put(ctx, []byte(body), queue.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	var inCall trace.SpanContext
	done := make(chan struct{})
	l, err := listener.NewBatch(q, func(ctx context.Context, ms []*queue.Message) []error {
		inCall = trace.SpanContextFromContext(ctx)
		errs := make([]error, len(ms))
		for k, m := range ms {
			if string(m.Body) == "bad" {
				errs[k] = handler.Permanent(errors.New("no such sku"))
			}
		}
		close(done)
		return errs
	}, listener.Options{Tracer: tr.Listener(q), Poison: poisonQ, BatchMax: 3, BatchWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	if err := l.Start(lctx, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the batch handler was not called")
	}
	cancel()
	if err := l.Wait(); err != nil {
		t.Fatal(err)
	}
	calls := spans(sr, "process orders")
	if len(calls) != 1 {
		t.Fatalf("%d call spans, want 1", len(calls))
	}
	c := calls[0]
	if !inCall.Equal(c.SpanContext()) {
		t.Error("the call's context does not carry its span")
	}
	if len(c.Links()) != 3 {
		t.Errorf("%d links, want 3 (one per message's producer)", len(c.Links()))
	}
	if v, _ := attr(c, "messaging.batch.message_count"); v.AsInt64() != 3 {
		t.Errorf("batch message count %d", v.AsInt64())
	}
	var poisoned string
	for _, e := range c.Events() {
		if e.Name != tracing.EventPoisoned {
			continue
		}
		for _, a := range e.Attributes {
			if a.Key == "messaging.message.id" {
				poisoned = a.Value.AsString()
			}
		}
	}
	if poisoned != ids[1] || c.Status().Code != codes.Error {
		t.Errorf("poisoned %q (want %q), status %+v", poisoned, ids[1], c.Status())
	}
	// The put to the poison queue is the call's child.
	if ps := spans(sr, "send orders-poison"); len(ps) != 1 || ps[0].Parent().SpanID() != c.SpanContext().SpanID() {
		t.Errorf("poison put spans %v, want one, child of the call", ps)
	}
}
