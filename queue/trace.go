package queue

import (
	"context"

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
