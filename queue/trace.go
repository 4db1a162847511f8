package queue

import (
	"context"
	"fmt"

	"github.com/adaptq/adaptq/internal/tracehook"
	"github.com/adaptq/adaptq/queue/driver"
)

// Tracer follows puts: package tracing implements it with OpenTelemetry (a
// producer span per put, its trace context written into the message's
// Metadata), so that package queue itself imports no tracing library. A
// queue without one (the default, unless package tracing is imported)
// pays one comparison per put.
type Tracer interface {
	// StartPut begins a put of n messages to q, before the put is checked
	// or sent; md is the metadata of a put of one message (nil for a
	// batch), whose trace context, if any, is the put's parent when ctx
	// carries none (a message put again, from a poison queue, stays in its
	// trace). The put runs under the returned context, and the returned
	// PutSpan follows it; a nil PutSpan leaves the put untraced.
	StartPut(ctx context.Context, q *Queue, n int, md map[string]string) (context.Context, PutSpan)
}

// PutSpan is one put, as Tracer.StartPut began it.
type PutSpan interface {
	// Inject returns the metadata to store with a message put with md: md
	// itself when it adds nothing (with no trace to pass on, a message stays
	// byte for byte what it would be without tracing), else a new map (md
	// is the caller's and is never changed).
	Inject(md map[string]string) map[string]string
	// End ends the put: id is the message's id for a put of one message
	// ("" otherwise, or when it failed) and err the put's error.
	End(id string, err error)
}

// BatchPutSpan is a PutSpan that is told the outcome of each message of a
// batch put (PutBatch). A PutSpan that is not one is ended with End("",
// err), err the call's error, else one that counts the failed messages and
// wraps the first's.
type BatchPutSpan interface {
	PutSpan
	// EndBatch ends the put of a batch: err the call's error (results is
	// then nil), else results, one per message, in order.
	EndBatch(results []PutResult, err error)
}

// WithTracer makes t follow the queue's puts (and its siblings'), in place
// of the tracing package tracing registered, if any. A nil t turns tracing
// off for the queue.
func WithTracer(t Tracer) Option {
	return func(op *options) { op.tracer, op.tracerSet = t, true }
}

// tracerOf is the tracer o asks for, else the registered one.
func tracerOf(o options) Tracer {
	if o.tracerSet {
		return o.tracer
	}
	t, _ := tracehook.Queue.Load().(Tracer)
	return t
}

// tracedPut is Put under q's tracer: a span around the put, and the trace
// context in the message's metadata.
func (q *Queue) tracedPut(ctx context.Context, body []byte, opts PutOptions) (string, error) {
	ctx, opts, end := q.TracePut(ctx, body, opts)
	id, err := q.putUntraced(ctx, body, opts)
	end(id, err)
	return id, err
}

// TracePut is Put's tracing for a driver's own put paths (a put inside
// the caller's transaction): it begins the span of a put of one message
// with body and opts, and returns the context and the options to put with
// (the trace context added to a copy of their metadata, where it fits the
// backend's limits: a put never fails for tracing's sake), and end, to
// call once with the put's id and error. Without a tracer it returns ctx,
// opts and an end that does nothing.
func (q *Queue) TracePut(ctx context.Context, body []byte, opts PutOptions) (context.Context, PutOptions, func(id string, err error)) {
	if q.tracer == nil {
		return ctx, opts, noEnd
	}
	ctx, span := q.tracer.StartPut(ctx, q, 1, opts.Metadata)
	if span == nil {
		return ctx, opts, noEnd
	}
	if md := span.Inject(opts.Metadata); q.fitsMetadata(body, md) {
		opts.Metadata = md
	}
	return ctx, opts, span.End
}

// fitsMetadata reports whether a put of body with md passes the backend's
// limits: the portable check, and the driver's own exact one if it has one
// (driver.MetadataFitter).
func (q *Queue) fitsMetadata(body []byte, md map[string]string) bool {
	if driver.CheckMetadata(md, q.f.Metadata, len(body), q.f.MaxBody) != nil {
		return false
	}
	f, ok := q.raw.(driver.MetadataFitter)
	return !ok || f.FitMetadata(body, md) == nil
}

func noEnd(string, error) {}

// tracedPutBatch is PutBatch under q's tracer: one span around the whole
// call, the trace context in a copy of each message's metadata where it
// fits.
func (q *Queue) tracedPutBatch(ctx context.Context, msgs []PutMessage) ([]PutResult, error) {
	ctx, span := q.tracer.StartPut(ctx, q, len(msgs), nil)
	if span == nil {
		return q.putBatch(ctx, msgs, nil)
	}
	results, err := q.putBatch(ctx, msgs, span)
	endBatch(span, results, err)
	return results, err
}

// endBatch ends span with a batch put's outcome.
func endBatch(span PutSpan, results []PutResult, err error) {
	if b, ok := span.(BatchPutSpan); ok {
		b.EndBatch(results, err)
		return
	}
	if err == nil {
		failed, first := 0, error(nil)
		for _, r := range results {
			if r.Err != nil {
				if failed++; first == nil {
					first = r.Err
				}
			}
		}
		if failed > 0 {
			err = fmt.Errorf("%d of %d messages failed, the first: %w", failed, len(results), first)
		}
	}
	span.End("", err)
}

// TracePutBatch is PutBatch's tracing for a driver's own batch put paths
// (a batch put inside the caller's transaction): it begins the span of a
// put of n messages and returns the context to put with, inject, which
// returns a message's options (checked already) with the trace context
// added to a copy of their metadata where it fits the backend's limits,
// and end, to call once with the call's error or, if nil, its results.
// Without a tracer it returns ctx, an inject that returns the options
// unchanged and an end that does nothing.
func (q *Queue) TracePutBatch(ctx context.Context, n int) (context.Context, func(body []byte, opts PutOptions) PutOptions, func(results []PutResult, err error)) {
	if q.tracer == nil {
		return ctx, noInject, noEndBatch
	}
	ctx, span := q.tracer.StartPut(ctx, q, n, nil)
	if span == nil {
		return ctx, noInject, noEndBatch
	}
	inject := func(body []byte, opts PutOptions) PutOptions {
		opts.Metadata = q.traceMetadata(span, body, opts.Metadata)
		return opts
	}
	return ctx, inject, func(results []PutResult, err error) { endBatch(span, results, err) }
}

func noInject(_ []byte, opts PutOptions) PutOptions { return opts }
func noEndBatch([]PutResult, error)                 {}

// traceMetadata is md with span's trace context added (in a copy) where
// it fits the backend's limits, else md.
func (q *Queue) traceMetadata(span PutSpan, body []byte, md map[string]string) map[string]string {
	if t := span.Inject(md); q.fitsMetadata(body, t) {
		return t
	}
	return md
}

// inject is the driver options of a checked message with span's trace
// context added to (a copy of) their metadata, where it fits the backend's
// limits; o unchanged otherwise, or without a span.
func (q *Queue) inject(span PutSpan, body []byte, o driver.PutOptions) driver.PutOptions {
	if span == nil {
		return o
	}
	o.Metadata = q.traceMetadata(span, body, o.Metadata)
	return o
}
