// Package tracing follows messages with OpenTelemetry, from the put that
// wrote one to the handler that finished it: a producer span on each put
// (Queue.Put; one per Queue.PutBatch, with messaging.batch.message_count
// and the failed messages' count and first error), whose W3C trace context
// is written into the message's Metadata (each message's, where it fits
// the backend's limits); a consumer span for each message a listener handles, child of
// the producer's span, that the handler's context carries; the handler's
// failure recorded on it; poisoning and requeueing as events on it. Exec
// handlers get TRACEPARENT (and TRACESTATE) in their environment and HTTP
// handlers the traceparent header (see handler.Propagation).
//
// Importing the package turns this on for every queue and listener the
// program makes afterwards, with OpenTelemetry's global TracerProvider and
// TextMapPropagator (otel.SetTracerProvider, otel.SetTextMapPropagator),
// as database/sql drivers register on import:
//
//	import _ "github.com/adaptq/adaptq/tracing"
//
// Register(New(WithTracerProvider(tp), WithPropagator(p))) uses others;
// queue.WithTracer and listener.Options.Tracer set them for one queue or
// listener. adaptq configures no exporter: the program does (see the
// README), or `adaptq run` from the standard OTEL_* variables.
//
// Until a provider and a propagator are set, the global ones are no-ops:
// nothing is added to any message (each stays byte for byte what it is
// without tracing, on every backend), no span is made, and a put or a
// handled message costs two atomic loads. A program that does not import
// this package pays nothing: packages queue, listener and handler import no
// tracing library.
//
// A batch handler's call is one consumer span linked to the producer span
// of each of its messages (listener.BatchTracer), with
// messaging.batch.message_count; its messages' failures, poisonings and
// requeues are events naming the message.
//
// Spans follow OpenTelemetry's messaging semantic conventions (v1.37.0):
// "send <queue>" (producer) and "process <queue>" (consumer), with
// messaging.system, messaging.destination.name, messaging.operation.name
// and .type, messaging.message.id, messaging.message.body.size,
// messaging.batch.message_count for puts of more than one message, and
// adaptq.message.dequeue_count.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/tracehook"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
)

// ScopeName is the instrumentation scope of adaptq's spans.
const ScopeName = "github.com/adaptq/adaptq/tracing"

// Attribute keys adaptq adds to the semantic conventions' own, and the
// names of its span events. They are stable: queries may rely on them.
const (
	// AttrDequeueCount is how many times the message has been got, this
	// delivery included (queue.Message.DequeueCount).
	AttrDequeueCount = attribute.Key("adaptq.message.dequeue_count")
	// AttrPoisoned is true on the span of a message that was moved to the
	// poison queue.
	AttrPoisoned = attribute.Key("adaptq.message.poisoned")
	// AttrPoisonReason and AttrPoisonID describe the poisoning (on the
	// EventPoisoned event).
	AttrPoisonReason = attribute.Key("adaptq.poison.reason")
	AttrPoisonID     = attribute.Key("adaptq.poison.message_id")
	// AttrRequeueDelay is how long, in seconds, a requeued message stays
	// hidden (0: visible again at once, or at its visibility timeout's end
	// when AttrRequeueHidden is false).
	AttrRequeueDelay  = attribute.Key("adaptq.requeue.delay")
	AttrRequeueHidden = attribute.Key("adaptq.requeue.hidden")
	// AttrPutFailed is how many messages of a batch put (Queue.PutBatch)
	// failed, on its span, whose exception event is the first's error.
	AttrPutFailed = attribute.Key("adaptq.put.failed_count")

	// EventPoisoned: the message was put to the poison queue.
	EventPoisoned = "adaptq.poisoned"
	// EventRequeued: the handler failed and the message goes back to its
	// queue for another delivery.
	EventRequeued = "adaptq.requeued"
)

// Option configures a Tracing.
type Option func(*Tracing)

// WithTracerProvider makes the spans with tp instead of the global
// provider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(t *Tracing) { t.tp = tp }
}

// WithPropagator writes and reads trace context with p instead of the
// global propagator.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(t *Tracing) { t.prop = p }
}

// Tracing makes adaptq's spans with one provider and one propagator.
type Tracing struct {
	// global: tp and prop are OpenTelemetry's globals (no option named
	// others), so while neither has been set (idle) nothing is traced.
	global bool
	tp     trace.TracerProvider          // nil: the global one, as it is at each use
	prop   propagation.TextMapPropagator // nil: the global one, as it is at each use
	tracer trace.Tracer                  // tp's, if tp is set
	// globalTracer is the tracer of the global provider last seen.
	globalTracer atomic.Pointer[providerTracer]
	// propagate is the handler.Propagation of every handler context.
	propagate handler.Propagation
}

// providerTracer is a provider and its tracer of adaptq's scope.
type providerTracer struct {
	tp         trace.TracerProvider
	tracer     trace.Tracer
	comparable bool // tp's type is: a later provider may be compared with it
}

// New returns a Tracing with OpenTelemetry's global provider and
// propagator, unless opts name others. The global ones are read at each
// use (otel.GetTracerProvider, otel.GetTextMapPropagator), so a provider
// or a propagator set after New, or set again, is used.
func New(opts ...Option) *Tracing {
	t := &Tracing{}
	for _, o := range opts {
		o(t)
	}
	t.global = t.tp == nil && t.prop == nil
	if t.tp != nil {
		t.tracer = t.tp.Tracer(ScopeName)
	}
	t.propagate = func(ctx context.Context, set func(k, v string)) {
		defer guard("handler's trace context", nil)
		t.propagator().Inject(ctx, setter(set))
	}
	return t
}

// propagator is the propagator t uses now.
func (t *Tracing) propagator() propagation.TextMapPropagator {
	if t.prop != nil {
		return t.prop
	}
	return otel.GetTextMapPropagator()
}

// tracerNow is the tracer t makes spans with now: its provider's, else
// the current global provider's (OpenTelemetry's delegation reaches only
// the first provider a program sets, so t does not rely on it).
func (t *Tracing) tracerNow() trace.Tracer {
	if t.tp != nil {
		return t.tracer
	}
	tp := otel.GetTracerProvider()
	if c := t.globalTracer.Load(); c != nil && c.comparable && c.tp == tp {
		return c.tracer
	}
	c := &providerTracer{tp: tp, tracer: tp.Tracer(ScopeName), comparable: reflect.TypeOf(tp).Comparable()}
	t.globalTracer.Store(c)
	return c.tracer
}

// unsetTP and unsetProp are OpenTelemetry's global provider and
// propagator as they are before any SetTracerProvider and
// SetTextMapPropagator: the delegating no-ops (nil if something set them
// before this package's init).
var unsetTP, unsetProp = unsetGlobals()

func unsetGlobals() (trace.TracerProvider, propagation.TextMapPropagator) {
	tp, prop := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	if fmt.Sprintf("%T", tp) != "*global.tracerProvider" {
		tp = nil
	}
	if fmt.Sprintf("%T", prop) != "*global.textMapPropagator" {
		prop = nil
	}
	return tp, prop
}

// idle reports whether t would only make no-op spans and write nothing:
// it uses the globals and the program has set neither. Then a put and a
// handled message cost two atomic loads, and no span.
func (t *Tracing) idle() bool {
	return t.global && unsetTP != nil && otel.GetTracerProvider() == unsetTP && otel.GetTextMapPropagator() == unsetProp
}

func init() { Register(New()) }

var _ listener.BatchTracer = (*consumer)(nil)

// Register makes t the tracing of every queue (queue.New, queue.Open) and
// listener (listener.New) made from now on that names none of its own.
// Importing the package registers New().
func Register(t *Tracing) {
	tracehook.Queue.Store(queue.Tracer(t))
	tracehook.Listener.Store(func(q *queue.Queue) listener.Tracer { return t.Listener(q) })
}

// QueueOption makes one queue's puts traced by t (queue.WithTracer).
func (t *Tracing) QueueOption() queue.Option { return queue.WithTracer(t) }

// system is the messaging.system of a driver: the semantic conventions'
// name where they have one, else the driver's.
func system(driverName string) attribute.KeyValue {
	if driverName == "sqs" {
		return semconv.MessagingSystemAWSSQS
	}
	return semconv.MessagingSystemKey.String(driverName)
}

// StartPut implements queue.Tracer: a producer span, "send <queue>".
// With nothing configured (see idle) it returns a nil PutSpan: the put goes
// on untraced.
// A put with no trace in ctx of a message whose metadata carries one (put
// again from a poison queue) continues that trace.
func (t *Tracing) StartPut(ctx context.Context, q *queue.Queue, n int, md map[string]string) (rctx context.Context, ps queue.PutSpan) {
	if t.idle() {
		return ctx, nil
	}
	in := ctx
	defer guard("put", func() { rctx, ps = in, nil })
	if len(md) > 0 && !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = t.propagator().Extract(ctx, propagation.MapCarrier(md))
	}
	attrs := []attribute.KeyValue{
		system(q.Features().Name),
		semconv.MessagingDestinationName(q.Name()),
		semconv.MessagingOperationName("send"),
		semconv.MessagingOperationTypeSend,
	}
	if n > 1 {
		attrs = append(attrs, semconv.MessagingBatchMessageCount(n))
	}
	sctx, span := t.tracerNow().Start(ctx, "send "+q.Name(), trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	return sctx, &putSpan{t: t, ctx: sctx, span: span}
}

type putSpan struct {
	t    *Tracing
	ctx  context.Context
	span trace.Span
}

// Inject adds the put's trace context to a copy of md; md itself when there
// is no trace to pass on (the no-op provider with no incoming trace) or
// the propagator writes nothing (the no-op propagator).
func (p *putSpan) Inject(md map[string]string) (out map[string]string) {
	defer guard("put", func() { out = md })
	if !p.span.SpanContext().IsValid() {
		return md
	}
	c := make(propagation.MapCarrier, 2)
	p.t.propagator().Inject(p.ctx, c)
	if len(c) == 0 {
		return md
	}
	for k, v := range md {
		if _, ours := c[k]; !ours {
			c[k] = v
		}
	}
	return c
}

func (p *putSpan) End(id string, err error) {
	defer guard("put", nil)
	if err != nil {
		recordError(p.span, err)
	} else if id != "" && p.span.IsRecording() {
		p.span.SetAttributes(semconv.MessagingMessageID(id))
	}
	p.span.End()
}

var _ queue.BatchPutSpan = (*putSpan)(nil)

// EndBatch ends the span of a PutBatch: the call's error, else how many
// of its messages failed (AttrPutFailed) and the first one's error.
func (p *putSpan) EndBatch(results []queue.PutResult, err error) {
	defer guard("put", nil)
	if err != nil {
		recordError(p.span, err)
		p.span.End()
		return
	}
	failed, first := 0, error(nil)
	for _, r := range results {
		if r.Err != nil {
			if failed++; first == nil {
				first = r.Err
			}
		}
	}
	if failed > 0 && p.span.IsRecording() {
		exception(p.span, first)
		p.span.SetAttributes(AttrPutFailed.Int(failed), errorType(first))
		p.span.SetStatus(codes.Error, fmt.Sprintf("%d of %d messages failed", failed, len(results)))
	}
	p.span.End()
}

// Listener returns the listener.Tracer of q's listener (Options.Tracer):
// a consumer span, "process <queue>", for each message.
func (t *Tracing) Listener(q *queue.Queue) listener.Tracer {
	name := q.Name()
	c := &consumer{t: t, name: "process " + name, attrs: []attribute.KeyValue{
		system(q.Features().Name),
		semconv.MessagingDestinationName(name),
		semconv.MessagingOperationName("process"),
		semconv.MessagingOperationTypeProcess,
	}}
	c.start = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(c.attrs...)}
	return c
}

type consumer struct {
	t     *Tracing
	name  string
	attrs []attribute.KeyValue    // the same for every message of the queue
	start []trace.SpanStartOption // kind and attrs, made once
}

// Start begins m's consumer span, child of the span that put m when m's
// metadata carries its trace context. With nothing configured (see idle)
// it returns ctx and a nil MessageSpan: the listener then traces nothing.
func (c *consumer) Start(ctx context.Context, m *queue.Message) (rctx context.Context, ms listener.MessageSpan) {
	if c.t.idle() {
		return ctx, nil
	}
	in := ctx
	var span trace.Span
	defer guard("message", func() {
		rctx, ms = in, nil
		if span != nil {
			defer guard("message", nil)
			span.End()
		}
	})
	if len(m.Metadata) > 0 {
		ctx = c.t.propagator().Extract(ctx, propagation.MapCarrier(m.Metadata))
	}
	// The queue's attributes (system, destination, operation: what a
	// sampler may look at) go in at the start, the message's after.
	ctx, span = c.t.tracerNow().Start(ctx, c.name, c.start...)
	if span.IsRecording() {
		span.SetAttributes(
			semconv.MessagingMessageID(m.ID),
			semconv.MessagingMessageBodySize(len(m.Body)),
			AttrDequeueCount.Int(m.DequeueCount))
	}
	if span.SpanContext().IsValid() {
		ctx = handler.WithPropagation(ctx, c.t.propagate)
	}
	return ctx, messageSpan{span}
}

type messageSpan struct{ span trace.Span }

func (s messageSpan) Poisoned(reason, poisonID string) {
	defer guard("message", nil)
	if !s.span.IsRecording() {
		return
	}
	s.span.AddEvent(EventPoisoned, trace.WithAttributes(AttrPoisonReason.String(reason), AttrPoisonID.String(poisonID)))
	s.span.SetAttributes(AttrPoisoned.Bool(true))
	s.span.SetStatus(codes.Error, "poisoned: "+reason)
}

func (s messageSpan) Requeued(delay time.Duration, hidden bool) {
	defer guard("message", nil)
	if s.span.IsRecording() {
		s.span.AddEvent(EventRequeued, trace.WithAttributes(AttrRequeueDelay.Float64(delay.Seconds()), AttrRequeueHidden.Bool(hidden)))
	}
}

func (s messageSpan) Context(ctx context.Context) context.Context {
	return trace.ContextWithSpan(ctx, s.span)
}

func (s messageSpan) End(err error) {
	defer guard("message", nil)
	if err != nil {
		recordError(s.span, err)
	}
	s.span.End()
}

// StartBatch begins the span of one call of a batch handler with ms
// (listener.BatchTracer): "process <queue>" with
// messaging.batch.message_count, linked to the span that put each message
// (the conventions' way for a batch, whose messages come from many
// traces), a child of ctx's span if any.
func (c *consumer) StartBatch(ctx context.Context, ms []*queue.Message) (rctx context.Context, bs listener.BatchSpan) {
	if c.t.idle() {
		return ctx, nil
	}
	in := ctx
	defer guard("batch call", func() { rctx, bs = in, nil })
	links := make([]trace.Link, 0, len(ms))
	prop := c.t.propagator()
	for _, m := range ms {
		if len(m.Metadata) == 0 {
			continue
		}
		if sc := trace.SpanContextFromContext(prop.Extract(context.Background(), propagation.MapCarrier(m.Metadata))); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{semconv.MessagingMessageID(m.ID)}})
		}
	}
	attrs := make([]attribute.KeyValue, 0, len(c.attrs)+1)
	attrs = append(append(attrs, c.attrs...), semconv.MessagingBatchMessageCount(len(ms)))
	sctx, span := c.t.tracerNow().Start(ctx, c.name, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attrs...), trace.WithLinks(links...))
	if span.SpanContext().IsValid() {
		sctx = handler.WithPropagation(sctx, c.t.propagate)
	}
	return sctx, &batchSpan{span: span, ms: ms}
}

type batchSpan struct {
	span   trace.Span
	ms     []*queue.Message
	failed atomic.Int32
}

func (b *batchSpan) Message(k int) listener.MessageSpan {
	return batchMessage{b: b, id: semconv.MessagingMessageID(b.ms[k].ID)}
}

func (b *batchSpan) End() {
	defer guard("batch call", nil)
	if n := b.failed.Load(); n > 0 && b.span.IsRecording() {
		b.span.SetStatus(codes.Error, fmt.Sprintf("%d of %d messages failed", n, len(b.ms)))
	}
	b.span.End()
}

// batchMessage is one message of a batch call: its events go on the call's
// span with the message's id.
type batchMessage struct {
	b  *batchSpan
	id attribute.KeyValue
}

func (m batchMessage) Poisoned(reason, poisonID string) {
	defer guard("batch call", nil)
	if m.b.span.IsRecording() {
		m.b.span.AddEvent(EventPoisoned, trace.WithAttributes(m.id, AttrPoisonReason.String(reason), AttrPoisonID.String(poisonID)))
	}
}

func (m batchMessage) Requeued(delay time.Duration, hidden bool) {
	defer guard("batch call", nil)
	if m.b.span.IsRecording() {
		m.b.span.AddEvent(EventRequeued, trace.WithAttributes(m.id, AttrRequeueDelay.Float64(delay.Seconds()), AttrRequeueHidden.Bool(hidden)))
	}
}

func (m batchMessage) Context(ctx context.Context) context.Context {
	return trace.ContextWithSpan(ctx, m.b.span)
}

func (m batchMessage) End(err error) {
	if err == nil {
		return
	}
	defer guard("batch call", nil)
	m.b.failed.Add(1)
	if m.b.span.IsRecording() {
		exception(m.b.span, err, m.id, errorType(err))
	}
}

// recordError records err on span: an exception event and status Error,
// both with err's text redacted, and error.type (permanent, panic,
// timeout, or the semantic conventions' _OTHER), which stays low in
// cardinality as the conventions ask.
func recordError(span trace.Span, err error) {
	if !span.IsRecording() {
		return
	}
	msg := exception(span, err)
	span.SetAttributes(errorType(err))
	span.SetStatus(codes.Error, msg)
}

// exception adds err's exception event to span, as span.RecordError does,
// with the text of queue.RedactError (a span goes to a collector outside
// the worker: no URL's signature or password, no token in it) and err's
// own type; it returns that text.
func exception(span trace.Span, err error, attrs ...attribute.KeyValue) string {
	msg := queue.RedactError(err).Error()
	span.AddEvent(semconv.ExceptionEventName, trace.WithAttributes(append(attrs,
		semconv.ExceptionType(fmt.Sprintf("%T", err)), semconv.ExceptionMessage(msg))...))
	return msg
}

// errorType is err's error.type.
func errorType(err error) attribute.KeyValue {
	var pe *handler.PanicError
	switch {
	case errors.As(err, &pe):
		return semconv.ErrorTypeKey.String("panic")
	case handler.IsPermanent(err):
		return semconv.ErrorTypeKey.String("permanent")
	case errors.Is(err, context.DeadlineExceeded):
		return semconv.ErrorTypeKey.String("timeout")
	}
	return semconv.ErrorTypeOther
}

// guard, deferred, recovers a panic of the program's OpenTelemetry parts
// (its propagator, sampler, span processor or exporter, which adaptq
// calls), reports it to OpenTelemetry's error handler (otel.Handle) and
// calls undo, if any, to leave what it was doing untraced: tracing never
// fails a put or a message, nor stops a worker.
func guard(what string, undo func()) {
	if r := recover(); r != nil {
		otel.Handle(fmt.Errorf("adaptq tracing: %s: recovered a panic of OpenTelemetry's provider or propagator: %v", what, r))
		if undo != nil {
			undo()
		}
	}
}

// setter adapts a set func to a propagation.TextMapCarrier (Inject only).
type setter func(k, v string)

func (s setter) Get(string) string { return "" }
func (s setter) Set(k, v string)   { s(k, v) }
func (s setter) Keys() []string    { return nil }
