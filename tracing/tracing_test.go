package tracing_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/adaptq/adaptq/adaptqtest"
	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/poison"
	"github.com/adaptq/adaptq/tracing"
)

// recorded registers a Tracing with an in-memory span recorder and W3C
// trace context for the test, and the global defaults again after it.
// Tests that call it do not run in parallel: the registration is global.
func recorded(t *testing.T) *tracetest.SpanRecorder {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	tracing.Register(tracing.New(tracing.WithTracerProvider(tp), tracing.WithPropagator(propagation.TraceContext{})))
	t.Cleanup(func() { tracing.Register(tracing.New()) })
	return sr
}

// spans returns the ended spans called name.
func spans(sr *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, a := range s.Attributes() {
		if a.Key == k {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

func hasEvent(s sdktrace.ReadOnlySpan, name string) bool {
	for _, e := range s.Events() {
		if e.Name == name {
			return true
		}
	}
	return false
}

func TestPutThenHandleIsOneTrace(t *testing.T) {
	sr := recorded(t)
	var mu sync.Mutex
	var inHandler trace.SpanContext
	k, err := adaptqtest.NewListener("orders", func(ctx context.Context, m *queue.Message) error {
		mu.Lock()
		inHandler = trace.SpanContextFromContext(ctx)
		mu.Unlock()
		return nil
	}, listener.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	id := k.Put("orders", []byte("A1"))
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	k.RequireHandled(t, id)

	send, process := spans(sr, "send orders"), spans(sr, "process orders")
	if len(send) != 1 || len(process) != 1 {
		t.Fatalf("%d send and %d process spans, want 1 and 1", len(send), len(process))
	}
	p, c := send[0], process[0]
	if p.SpanKind() != trace.SpanKindProducer || c.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("kinds %v and %v, want producer and consumer", p.SpanKind(), c.SpanKind())
	}
	if c.Parent().SpanID() != p.SpanContext().SpanID() || c.SpanContext().TraceID() != p.SpanContext().TraceID() {
		t.Errorf("consumer's parent %v, want the producer %v", c.Parent(), p.SpanContext())
	}
	mu.Lock()
	if !inHandler.Equal(c.SpanContext()) {
		t.Errorf("the handler's context carries %v, want the consumer span %v", inHandler, c.SpanContext())
	}
	mu.Unlock()
	for _, want := range []attribute.KeyValue{
		attribute.String("messaging.system", "memory"),
		attribute.String("messaging.destination.name", "orders"),
		attribute.String("messaging.operation.name", "process"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.message.id", id),
		attribute.Int("adaptq.message.dequeue_count", 1),
	} {
		if v, ok := attr(c, want.Key); !ok || v != want.Value {
			t.Errorf("consumer span's %s = %v, want %v", want.Key, v.Emit(), want.Value.Emit())
		}
	}
	if v, _ := attr(p, "messaging.message.id"); v.AsString() != id {
		t.Errorf("producer span's message id %q, want %q", v.AsString(), id)
	}
	if v, _ := attr(p, "messaging.operation.type"); v.AsString() != "send" {
		t.Errorf("producer span's operation type %q, want send", v.AsString())
	}
}

func TestRedeliveryIsASecondSpanOfTheTrace(t *testing.T) {
	sr := recorded(t)
	var mu sync.Mutex
	runs := 0
	k, err := adaptqtest.NewListener("orders", func(ctx context.Context, m *queue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if runs++; runs == 1 {
			return errors.New("the stock service is down")
		}
		return nil
	}, listener.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	id := k.Put("orders", []byte("A1"))
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	k.RequireHandled(t, id)
	send, process := spans(sr, "send orders"), spans(sr, "process orders")
	if len(send) != 1 || len(process) != 2 {
		t.Fatalf("%d send and %d process spans, want 1 and 2", len(send), len(process))
	}
	for i, c := range process {
		if c.Parent().SpanID() != send[0].SpanContext().SpanID() || c.SpanContext().TraceID() != send[0].SpanContext().TraceID() {
			t.Errorf("run %d: parent %v, want the producer %v", i+1, c.Parent(), send[0].SpanContext())
		}
		if v, _ := attr(c, "adaptq.message.dequeue_count"); v.AsInt64() != int64(i+1) {
			t.Errorf("run %d: dequeue count %d", i+1, v.AsInt64())
		}
	}
	failed, ok := process[0], process[1]
	if failed.Status().Code != codes.Error || !strings.Contains(failed.Status().Description, "stock service") {
		t.Errorf("first run's status %+v, want the handler's error", failed.Status())
	}
	if !hasEvent(failed, "exception") || !hasEvent(failed, tracing.EventRequeued) {
		t.Errorf("first run's events %v, want exception and %s", failed.Events(), tracing.EventRequeued)
	}
	if ok.Status().Code == codes.Error || hasEvent(ok, tracing.EventRequeued) {
		t.Errorf("second run: status %+v, events %v", ok.Status(), ok.Events())
	}
}

func TestPoisonedMessageSpanSaysSo(t *testing.T) {
	sr := recorded(t)
	k, err := adaptqtest.NewListener("orders", func(ctx context.Context, m *queue.Message) error {
		return handler.Permanent(errors.New("no such sku"))
	}, listener.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	id := k.Put("orders", []byte("A1"))
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	k.RequirePoisoned(t, id, poison.RulePermanent)
	process := spans(sr, "process orders")
	if len(process) != 1 {
		t.Fatalf("%d process spans, want 1", len(process))
	}
	c := process[0]
	if v, _ := attr(c, tracing.AttrPoisoned); !v.AsBool() || !hasEvent(c, tracing.EventPoisoned) {
		t.Errorf("poisoned message's span: attributes %v, events %v", c.Attributes(), c.Events())
	}
	if v, _ := attr(c, "error.type"); v.AsString() != "permanent" {
		t.Errorf("error.type %q, want permanent", v.AsString())
	}
	// The put to the poison queue is the consumer span's child.
	ps := spans(sr, "send orders"+"-poison")
	if len(ps) != 1 || ps[0].Parent().SpanID() != c.SpanContext().SpanID() {
		t.Fatalf("poison put spans %v, want one, child of the consumer span", ps)
	}
}

// A message of a poison queue's requeue keeps its trace: it was put under
// the consumer span (see above), so its handling is in the same trace.

func TestExecGetsTraceparent(t *testing.T) {
	sr := recorded(t)
	out := filepath.Join(t.TempDir(), "env")
	h, err := handler.Exec([]string{"sh", "-c", `printf '%s %s' "$TRACEPARENT" "${TRACESTATE-unset}" > "$OUT"`},
		handler.ExecOptions{Env: []string{"OUT=" + out, "TRACEPARENT=from-the-config"}})
	if err != nil {
		t.Fatal(err)
	}
	k, err := adaptqtest.NewListener("orders", h, listener.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	id := k.Put("orders", []byte("A1"))
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	k.RequireHandled(t, id)
	c := spans(sr, "process orders")[0].SpanContext()
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want := "00-" + c.TraceID().String() + "-" + c.SpanID().String() + "-01 unset"
	if string(got) != want {
		t.Errorf("TRACEPARENT TRACESTATE = %q, want %q", got, want)
	}
}

func TestHTTPGetsTraceparent(t *testing.T) {
	sr := recorded(t)
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("traceparent"))
		mu.Unlock()
	}))
	defer srv.Close()
	h, err := handler.HTTP(srv.URL, handler.HTTPOptions{Header: http.Header{"Traceparent": {"from-the-config"}}})
	if err != nil {
		t.Fatal(err)
	}
	k, err := adaptqtest.NewListener("orders", h, listener.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	id := k.Put("orders", []byte("A1"))
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	k.RequireHandled(t, id)
	c := spans(sr, "process orders")[0].SpanContext()
	want := "00-" + c.TraceID().String() + "-" + c.SpanID().String() + "-01"
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != want {
		t.Errorf("traceparent headers %q, want [%q]", got, want)
	}
}

// With OpenTelemetry's no-op global provider and propagator (what a
// program that configured nothing has), tracing adds nothing to a message.
func TestNoopAddsNoMetadata(t *testing.T) {
	tracing.Register(tracing.New())
	k, err := adaptqtest.NewListener("orders", func(ctx context.Context, m *queue.Message) error {
		return errors.New("keep it")
	}, listener.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	q, err := k.Queue("orders")
	if err != nil {
		t.Fatal(err)
	}
	for _, md := range []map[string]string{nil, {"tenant": "a"}} {
		if _, err := q.Put(context.Background(), []byte("A1"), queue.PutOptions{Metadata: md}); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := q.Peek(context.Background(), 2)
	if err != nil || len(ms) != 2 {
		t.Fatalf("peek: %d messages, %v", len(ms), err)
	}
	if ms[0].Metadata != nil || len(ms[1].Metadata) != 1 || ms[1].Metadata["tenant"] != "a" {
		t.Errorf("metadata %v and %v, want nil and the tenant alone", ms[0].Metadata, ms[1].Metadata)
	}
	res, err := q.PutBatch(context.Background(), []queue.PutMessage{{Body: []byte("A1")}, {Body: []byte("A2"), Opts: queue.PutOptions{Metadata: map[string]string{"tenant": "a"}}}})
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("put batch: %v, %+v", err, res)
	}
	ms, err = q.Peek(context.Background(), 4)
	if err != nil || len(ms) != 4 {
		t.Fatalf("peek: %d messages, %v", len(ms), err)
	}
	byBody := map[string]map[string]string{} // the kit's driver puts a batch's messages concurrently
	for _, m := range ms[2:] {
		byBody[string(m.Body)] = m.Metadata
	}
	if byBody["A1"] != nil || len(byBody["A2"]) != 1 || byBody["A2"]["tenant"] != "a" {
		t.Errorf("batch: metadata %v, want nil for A1 and the tenant alone for A2", byBody)
	}
}

// With nothing configured, a traced Put or PutBatch allocates no more
// than one on a queue without tracing.
func TestNoopAllocatesNothing(t *testing.T) {
	tracing.Register(tracing.New())
	ctx := context.Background()
	allocs := func(opt queue.Option, put func(q *queue.Queue)) float64 {
		q, err := memory.NewStore().Queue("orders", opt)
		if err != nil {
			t.Fatal(err)
		}
		return testing.AllocsPerRun(200, func() { put(q) })
	}
	md := map[string]string{"tenant": "a"}
	batch := []queue.PutMessage{{Body: []byte("A1")}, {Body: []byte("A2"), Opts: queue.PutOptions{Metadata: md}}}
	for name, put := range map[string]func(q *queue.Queue){
		"put": func(q *queue.Queue) {
			if _, err := q.Put(ctx, []byte("A1"), queue.PutOptions{Metadata: md}); err != nil {
				t.Fatal(err)
			}
		},
		"put batch": func(q *queue.Queue) {
			if _, err := q.PutBatch(ctx, batch); err != nil {
				t.Fatal(err)
			}
		},
	} {
		traced, plain := allocs(tracing.New().QueueOption(), put), allocs(queue.WithTracer(nil), put)
		if traced != plain {
			t.Errorf("%s: %v allocations with tracing unconfigured, %v without tracing", name, traced, plain)
		}
	}
}

// Registered with no options (as the import does), tracing follows
// OpenTelemetry's globals, even when they are set after the queue and the
// listener were made. It leaves the globals set: keep it last.
func TestGlobalProviderByDefault(t *testing.T) {
	tracing.Register(tracing.New())
	k, err := adaptqtest.NewListener("orders", func(ctx context.Context, m *queue.Message) error { return nil }, listener.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	sr := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)))
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	})
	id := k.Put("orders", []byte("A1"))
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	k.RequireHandled(t, id)
	send, process := spans(sr, "send orders"), spans(sr, "process orders")
	if len(send) != 1 || len(process) != 1 || process[0].Parent().SpanID() != send[0].SpanContext().SpanID() {
		t.Fatalf("%d send and %d process spans, want 1 and 1, the producer the consumer's parent", len(send), len(process))
	}
}

// Registered with no options, tracing follows OpenTelemetry's globals as
// they are now, not only the first provider and propagator the program
// set (OpenTelemetry's delegation reaches the first only): a program (or
// `adaptq run`, then `adaptq enqueue`, in one test binary) that replaces
// its provider gets its spans in the new one. It leaves the globals set
// (no-op): keep it last, with TestGlobalProviderByDefault.
func TestGlobalProviderReplacedIsFollowed(t *testing.T) {
	tracing.Register(tracing.New())
	t.Cleanup(func() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	})
	q, err := memory.NewStore().Queue("orders")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var srs []*tracetest.SpanRecorder
	for range 2 {
		sr := tracetest.NewSpanRecorder()
		srs = append(srs, sr)
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)))
		otel.SetTextMapPropagator(propagation.TraceContext{})
		if _, err := q.Put(ctx, []byte("A1"), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, sr := range srs {
		if n := len(spans(sr, "send orders")); n != 1 {
			t.Errorf("provider %d recorded %d send spans, want 1", i+1, n)
		}
	}
	// The propagator too: with the global one replaced by a no-op, a put
	// carries no trace context.
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	if _, err := q.Put(ctx, []byte("A2"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	ms, err := q.Peek(ctx, 3)
	if err != nil || len(ms) != 3 {
		t.Fatalf("peek: %d, %v", len(ms), err)
	}
	if ms[1].Metadata["traceparent"] == "" || ms[2].Metadata != nil {
		t.Errorf("metadata %v then %v, want a traceparent, then none", ms[1].Metadata, ms[2].Metadata)
	}
}
