package tracing_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/adaptq/adaptq/adaptqtest"
	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/tracing"
)

// A put that fits the backend without trace context never fails because
// tracing adds some: on Azure without claim-check, a body just under the
// message limit leaves no room for the metadata envelope, which the
// portable queue's estimate (keys, values, 6 bytes a pair) undercounts.
// The put goes on without the trace context, and the message arrives.
func TestPutAtAzureLimitNotFailedByTraceContext(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Azurite")
	}
	sr := recorded(t)
	ctx := context.Background()
	suffix := time.Now().Format("150405") + "lim"
	q, err := queue.Open(ctx, azuritetest.Start(t).URL("tracelimit"+suffix, "claim_check", "false"))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	// Room for the trace context by the estimate (traceparent: 11 + 55 + 6
	// bytes), none for the envelope's own JSON.
	body := bytes.Repeat([]byte("x"), q.Features().MaxBody-80)
	if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
		t.Fatalf("put of %d bytes (limit %d) with tracing: %v", len(body), q.Features().MaxBody, err)
	}
	// And in a batch put (one span for the call, its trace context in
	// each message's metadata where it fits).
	rs, err := q.PutBatch(ctx, []queue.PutMessage{{Body: body}, {Body: []byte("small")}})
	if err != nil {
		t.Fatalf("put batch with tracing: %v", err)
	}
	for k, r := range rs {
		if r.Err != nil {
			t.Errorf("put batch: message %d of %d bytes: %v", k, len(body), r.Err)
		}
	}
	ms, err := q.Get(ctx, 3, time.Minute)
	if err != nil || len(ms) != 3 {
		t.Fatalf("get: %d messages, %v", len(ms), err)
	}
	if n := len(spans(sr, "send "+q.Name())); n != 2 {
		t.Fatalf("%d producer spans, want 2", n)
	}
}

// panicky is a program's propagator with a bug: it panics on every call.
type panicky struct{ propagation.TraceContext }

func (panicky) Extract(context.Context, propagation.TextMapCarrier) context.Context {
	panic("propagator bug")
}
func (panicky) Inject(context.Context, propagation.TextMapCarrier) { panic("propagator bug") }

// panickyInject reads trace context but panics writing it.
type panickyInject struct{ propagation.TraceContext }

func (panickyInject) Inject(context.Context, propagation.TextMapCarrier) { panic("propagator bug") }

// A panic in the program's OpenTelemetry parts (here its propagator) fails
// neither the put nor the message, nor kills the worker: the message goes
// untraced and the panic is reported to OpenTelemetry's error handler.
func TestPanickingPropagatorFailsNoPutNorMessage(t *testing.T) {
	for name, p := range map[string]propagation.TextMapPropagator{"extract": panicky{}, "inject": panickyInject{}} {
		t.Run(name, func(t *testing.T) { testPanickingPropagator(t, p) })
	}
}

func testPanickingPropagator(t *testing.T, p propagation.TextMapPropagator) {
	var reported atomic.Int32
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) { reported.Add(1) }))
	t.Cleanup(func() { otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Print(err) })) })
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	tracing.Register(tracing.New(tracing.WithTracerProvider(tp), tracing.WithPropagator(p)))
	t.Cleanup(func() { tracing.Register(tracing.New()) })

	handled := atomic.Int32{}
	k, err := adaptqtest.NewListener("orders", func(ctx context.Context, m *queue.Message) error {
		handled.Add(1)
		handler.Propagate(ctx, func(k, v string) {}) // as Exec and HTTP do
		return nil
	}, listener.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	q, err := k.Queue("orders")
	if err != nil {
		t.Fatal(err)
	}
	md := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	id, err := q.Put(context.Background(), []byte("A1"), queue.PutOptions{Metadata: md})
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	k.RequireHandled(t, id)
	if handled.Load() != 1 {
		t.Errorf("handler ran %d times, want 1", handled.Load())
	}
	if reported.Load() == 0 {
		t.Error("no panic reported to OpenTelemetry's error handler")
	}
}

// failingPut is the memory driver with puts that fail as a cloud SDK's do,
// the request's URL and its signature in the error's text.
type failingPut struct{ driver.Queue }

func (failingPut) Put(context.Context, []byte, driver.PutOptions) (string, error) {
	return "", errors.New("PUT https://acct.queue.core.windows.net/orders/messages?sv=2022-11-02&sig=SECRETSIG: 403 AuthenticationFailed")
}

// A failed put's span, which goes to a collector outside the worker,
// records the error with its secrets redacted, as the logs do.
func TestFailedPutSpanHidesSecrets(t *testing.T) {
	sr := recorded(t)
	q, err := memory.NewStore().Queue("orders", queue.WithWrapper(func(d driver.Queue) driver.Queue { return failingPut{d} }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Put(context.Background(), []byte("A1"), queue.PutOptions{}); err == nil {
		t.Fatal("the put did not fail")
	}
	// A batch put whose messages fail (put one by one: the wrapper has no
	// PutBatch) records the first message's error.
	rs, err := q.PutBatch(context.Background(), []queue.PutMessage{{Body: []byte("B1")}, {Body: []byte("B2")}})
	if err != nil || len(rs) != 2 || rs[0].Err == nil {
		t.Fatalf("put batch: %v, %v; want each message failed", rs, err)
	}
	send := spans(sr, "send orders")
	if len(send) != 2 {
		t.Fatalf("%d send spans, want 2", len(send))
	}
	for _, s := range send {
		if s.Status().Code != codes.Error {
			t.Errorf("status %v, want Error", s.Status())
		}
		texts := []string{s.Status().Description}
		events := 0
		for _, e := range s.Events() {
			events++
			for _, a := range e.Attributes {
				texts = append(texts, a.Value.Emit())
			}
		}
		if events == 0 {
			t.Errorf("span %v records no exception", s.Attributes())
		}
		for _, x := range texts {
			if strings.Contains(x, "SECRETSIG") {
				t.Errorf("the span shows the signature: %q", x)
			}
		}
	}
}

// A producer that writes trace context itself (any metadata it likes)
// cannot smuggle a header to an http: handler, nor make its request fail:
// the handler gets the trace context as the propagator re-encodes it,
// valid or left out.
func TestForgedTraceContextReachesHandlersOnlyValidated(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tr := tracing.New(tracing.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))),
		tracing.WithPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})))
	tracing.Register(tr)
	t.Cleanup(func() { tracing.Register(tracing.New()) })
	var mu sync.Mutex
	var got []http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Clone())
		mu.Unlock()
	}))
	defer srv.Close()
	h, err := handler.HTTP(srv.URL, handler.HTTPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k, err := adaptqtest.NewListener("orders", h, listener.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	// The producer's queue writes its metadata as it is.
	tracing.Register(tracing.New(tracing.WithTracerProvider(noop.NewTracerProvider()), tracing.WithPropagator(propagation.NewCompositeTextMapPropagator())))
	q, err := k.Queue("orders")
	tracing.Register(tr)
	if err != nil {
		t.Fatal(err)
	}
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	var many []string
	for i := range 40 {
		many = append(many, fmt.Sprintf("k%d=%s", i, strings.Repeat("v", 80)))
	}
	var ids []string
	for _, md := range []map[string]string{
		{"traceparent": parent, "tracestate": "a=b\r\nX-Evil: 1", "baggage": "k=v\r\nX-Evil2: 1"},
		{"traceparent": parent + "\r\nX-Evil: 1"},
		{"traceparent": parent, "tracestate": strings.Join(many, ","), "baggage": "user=a%0D%0AX-Evil3:%201"},
	} {
		id, err := q.Put(context.Background(), []byte("A1"), queue.PutOptions{Metadata: md})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if ms, err := q.Peek(context.Background(), 1); err != nil || len(ms) != 1 || ms[0].Metadata["tracestate"] != "a=b\r\nX-Evil: 1" {
		t.Fatalf("the producer's metadata was not stored as it wrote it: %v, %v", ms, err)
	}
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		k.RequireHandled(t, id)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(ids) {
		t.Fatalf("%d requests, want %d", len(got), len(ids))
	}
	for _, hd := range got {
		for name, vs := range hd {
			if strings.HasPrefix(name, "X-Evil") {
				t.Errorf("a producer's header reached the handler: %s: %q", name, vs)
			}
			for _, v := range vs {
				if strings.ContainsAny(v, "\r\n") {
					t.Errorf("header %s has a line break: %q", name, v)
				}
			}
		}
		if ts := hd.Get("tracestate"); strings.Count(ts, ",") >= 32 {
			t.Errorf("tracestate of %d members passed", strings.Count(ts, ",")+1)
		}
		if tp := hd.Get("traceparent"); len(tp) != len(parent) {
			t.Errorf("traceparent %q", tp)
		}
	}
}
