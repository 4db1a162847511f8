package listener

import (
	"context"
	"time"

	"github.com/adaptq/adaptq/internal/tracehook"
	"github.com/adaptq/adaptq/queue"
)

// Tracer follows each message the listener handles: package tracing
// implements it with OpenTelemetry (a consumer span per message, child of
// the span that put it), so that the listener itself imports no tracing
// library. A listener without one (the default, unless package tracing is
// imported) pays one comparison per message.
type Tracer interface {
	// Start is called on the runner's goroutine before m's handler runs,
	// and before a message is poisoned without running. The handler runs
	// under the returned context; the returned MessageSpan is told what
	// becomes of m, then ended, on the same goroutine. A nil MessageSpan
	// (nothing to trace) leaves m untraced.
	Start(ctx context.Context, m *queue.Message) (context.Context, MessageSpan)
}

// MessageSpan is one message's handling, as Tracer.Start began it.
type MessageSpan interface {
	// Poisoned: the message was put to the poison queue (poisonID its id
	// there) for reason.
	Poisoned(reason, poisonID string)
	// Requeued: the handler failed and the message goes back to its queue,
	// visible again after delay (released at once when delay is 0 and
	// hidden is true; left to its visibility timeout when hidden is false).
	Requeued(delay time.Duration, hidden bool)
	// Context returns ctx carrying the span: what the put to the poison
	// queue runs under, so that its own span is the message's child.
	Context(ctx context.Context) context.Context
	// End ends the span with the handler's result (nil: handled, or never
	// run).
	End(err error)
}

// tracerFor is the tracer o names, else the one package tracing
// registered, made for q.
func tracerFor(o Options, q *queue.Queue) Tracer {
	if o.Tracer != nil || o.NoTracer {
		return o.Tracer
	}
	if mk, ok := tracehook.Listener.Load().(func(*queue.Queue) Tracer); ok {
		return mk(q)
	}
	return nil
}

// traceStart begins message i's span and returns the context its handler
// runs under. The batch's spans are made with its first traced message.
func (b *batch) traceStart(ctx context.Context, i int) context.Context {
	if b.l.tracer == nil {
		return ctx // inlined: no tracer
	}
	return b.startSpan(ctx, i)
}

func (b *batch) startSpan(ctx context.Context, i int) context.Context {
	ctx, s := b.l.tracer.Start(ctx, b.msgs[i])
	if s != nil {
		b.setSpan(i, s)
	}
	return ctx
}

// setSpan makes s message i's span.
func (b *batch) setSpan(i int, s MessageSpan) {
	p := b.spans.Load()
	if p == nil {
		b.spans.CompareAndSwap(nil, new([queue.MaxBatchSize]MessageSpan))
		p = b.spans.Load()
	}
	p[i] = s
}

// traceCall begins the span of one call of a batch handler with ms (the
// messages of runs), when the tracer follows calls (BatchTracer), and
// makes each message's span the call's: what becomes of it is told there.
func (l *Listener) traceCall(ctx context.Context, runs []ref, ms []*queue.Message) (context.Context, BatchSpan) {
	bt, ok := l.tracer.(BatchTracer)
	if !ok {
		return ctx, nil
	}
	ctx, call := bt.StartBatch(ctx, ms)
	if call == nil {
		return ctx, nil
	}
	for k, r := range runs {
		r.b.setSpan(r.i, call.Message(k))
	}
	return ctx, call
}

// traceCallEnd ends each message's part of call with its result, then
// the call's span.
func (l *Listener) traceCallEnd(call BatchSpan, runs []ref, res []error) {
	if call == nil {
		return
	}
	for k, r := range runs {
		err := res[k]
		if err != nil {
			err = queue.RedactError(err)
		}
		r.b.traceEnd(r.i, err)
	}
	call.End()
}

// span is message i's span, nil if it has none. Only message i's runner
// calls it.
func (b *batch) span(i int) MessageSpan {
	if p := b.spans.Load(); p != nil {
		return p[i]
	}
	return nil
}

// traceEnd ends message i's span, if it has one.
func (b *batch) traceEnd(i int, err error) {
	if b.spans.Load() != nil { // inlined: no span in the batch
		b.endSpan(i, err)
	}
}

func (b *batch) endSpan(i int, err error) {
	if s := b.span(i); s != nil {
		s.End(err)
		b.spans.Load()[i] = nil
	}
}

func (b *batch) tracePoisoned(i int, reason, poisonID string) {
	if s := b.span(i); s != nil {
		s.Poisoned(reason, poisonID)
	}
}

func (b *batch) traceRequeued(i int, delay time.Duration, hidden bool) {
	if s := b.span(i); s != nil {
		s.Requeued(delay, hidden)
	}
}

// traceContext is ctx carrying message i's span, if it has one.
func (b *batch) traceContext(i int, ctx context.Context) context.Context {
	if s := b.span(i); s != nil {
		return s.Context(ctx)
	}
	return ctx
}

// BatchTracer is what a Tracer also implements to follow the calls of a
// batch handler (package tracing's does): one span per call, linked to
// the span that put each of its messages.
type BatchTracer interface {
	// StartBatch begins the span of one call of the batch handler with ms.
	// The call runs under the returned context; what becomes of ms[k] is
	// told to the returned BatchSpan's Message(k), whose End records
	// ms[k]'s result; then the BatchSpan is ended.
	StartBatch(ctx context.Context, ms []*queue.Message) (context.Context, BatchSpan)
}

// BatchSpan is one call of a batch handler, as BatchTracer.StartBatch
// began it.
type BatchSpan interface {
	// Message is the MessageSpan of the call's k-th message: its events
	// land on the call's span, naming the message.
	Message(k int) MessageSpan
	// End ends the call's span, after every message's End.
	End()
}
