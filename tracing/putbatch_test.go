package tracing_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/adaptq/adaptq/adaptqtest"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/tracing"
)

// A PutBatch is one producer span, and each of its messages, handled by a
// handler of one message, has a consumer span that is its child.
func TestPutBatchThenHandleIsOneTrace(t *testing.T) {
	sr := recorded(t)
	k, err := adaptqtest.NewListener("orders", func(ctx context.Context, m *queue.Message) error { return nil }, listener.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	q, err := k.Queue("orders")
	if err != nil {
		t.Fatal(err)
	}
	msgs := []queue.PutMessage{{Body: []byte("A1")}, {Body: []byte("A2"), Opts: queue.PutOptions{Metadata: map[string]string{"tenant": "a"}}}, {Body: []byte("A3")}}
	res, err := q.PutBatch(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("message %d: %v", i, r.Err)
		}
		ids = append(ids, r.ID)
	}
	if len(msgs[1].Opts.Metadata) != 1 {
		t.Errorf("the caller's metadata was changed: %v", msgs[1].Opts.Metadata)
	}
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		k.RequireHandled(t, id)
	}

	send, process := spans(sr, "send orders"), spans(sr, "process orders")
	if len(send) != 1 || len(process) != 3 {
		t.Fatalf("%d send and %d process spans, want 1 and 3", len(send), len(process))
	}
	p := send[0]
	if p.SpanKind() != trace.SpanKindProducer {
		t.Errorf("producer kind %v", p.SpanKind())
	}
	if v, _ := attr(p, "messaging.batch.message_count"); v.AsInt64() != 3 {
		t.Errorf("batch message count %d, want 3", v.AsInt64())
	}
	if p.Status().Code == codes.Error {
		t.Errorf("producer status %+v", p.Status())
	}
	for _, c := range process {
		if c.Parent().SpanID() != p.SpanContext().SpanID() || c.SpanContext().TraceID() != p.SpanContext().TraceID() {
			t.Errorf("consumer's parent %v, want the batch's producer %v", c.Parent(), p.SpanContext())
		}
	}
}

// A message of a batch whose metadata leaves no room for the trace context
// is put without it; one that fails its own checks fails alone, and the
// batch's span counts it and records its error; a call refused as a whole
// is the span's error.
func TestPutBatchTraceContextOnlyWhereItFits(t *testing.T) {
	t.Parallel()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	tr := tracing.New(tracing.WithTracerProvider(tp), tracing.WithPropagator(propagation.TraceContext{}))
	q, err := memory.NewStore().Queue("orders", tr.QueueOption())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	max := q.Features().Metadata.MaxPairs
	full, roomy := map[string]string{}, map[string]string{}
	for i := range max {
		full[fmt.Sprintf("k%d", i)] = "v"
		if i < max-1 {
			roomy[fmt.Sprintf("k%d", i)] = "v"
		}
	}
	res, err := q.PutBatch(ctx, []queue.PutMessage{
		{Body: []byte("full"), Opts: queue.PutOptions{Metadata: full}},
		{Body: []byte("roomy"), Opts: queue.PutOptions{Metadata: roomy}},
		{Body: []byte("none")},
		{Body: make([]byte, q.MaxBodySize()+1)},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res[:3] {
		if r.Err != nil {
			t.Fatalf("message %d: %v", i, r.Err)
		}
	}
	if !errors.Is(res[3].Err, queue.ErrTooLarge) {
		t.Fatalf("message 3: %v, want ErrTooLarge", res[3].Err)
	}
	if len(full) != max || len(roomy) != max-1 {
		t.Errorf("the caller's metadata was changed: %d and %d pairs", len(full), len(roomy))
	}
	ms, err := q.Get(ctx, 3, time.Minute)
	if err != nil || len(ms) != 3 {
		t.Fatalf("get: %d, %v", len(ms), err)
	}
	send := spans(sr, "send orders")
	if len(send) != 1 {
		t.Fatalf("%d send spans, want 1", len(send))
	}
	p := send[0]
	want := "00-" + p.SpanContext().TraceID().String() + "-" + p.SpanContext().SpanID().String() + "-01"
	for _, m := range ms {
		tp, traced := m.Metadata["traceparent"]
		switch body := string(m.Body); {
		case body == "full" && (traced || len(m.Metadata) != max):
			t.Errorf("full: traceparent %v, %d pairs; want none and %d", traced, len(m.Metadata), max)
		case body != "full" && tp != want:
			t.Errorf("%s: traceparent %q, want the batch's %q", body, tp, want)
		}
	}
	if p.Status().Code != codes.Error || p.Status().Description != "1 of 4 messages failed" {
		t.Errorf("status %+v, want 1 of 4 messages failed", p.Status())
	}
	if v, _ := attr(p, tracing.AttrPutFailed); v.AsInt64() != 1 {
		t.Errorf("%s = %d, want 1", tracing.AttrPutFailed, v.AsInt64())
	}
	if len(p.Events()) != 1 || p.Events()[0].Name != "exception" || !strings.Contains(fmt.Sprint(p.Events()[0].Attributes), "message 3") {
		t.Errorf("events %v, want the first failure's exception", p.Events())
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := q.PutBatch(cctx, []queue.PutMessage{{Body: []byte("A1")}, {Body: []byte("A2")}}); !errors.Is(err, context.Canceled) {
		t.Fatalf("put batch with an ended context: %v", err)
	}
	send = spans(sr, "send orders")
	if len(send) != 2 || send[1].Status().Code != codes.Error || !strings.Contains(send[1].Status().Description, "context canceled") {
		t.Errorf("%d send spans, the call's refusal %+v", len(send), send[len(send)-1].Status())
	}
}
