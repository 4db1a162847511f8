package adaptq

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
)

// BatchSizeBuckets are the upper bounds of the batch size histogram
// (messages per batch handler call): from one message to
// listener.MaxBatchMax, with a get's 10 (SQS) and 32 (the Best Practices
// article) and the default call of 100 among them.
var BatchSizeBuckets = []float64{1, 2, 5, 10, 20, 32, 50, 100, 200, 500, 1000, 10000}

// WithBatchMiddleware wraps every batch handler in mws, first outermost.
// WithMiddleware's middlewares handle one message and do not apply to
// batch handlers.
func WithBatchMiddleware(mws ...handler.BatchMiddleware) Option {
	return func(w *Worker) { w.batchMws = append(w.batchMws, mws...) }
}

// HandleBatch registers a batch handler under name, in the namespace of
// Handle: a queue whose handler key names it gets its messages in calls
// of up to batch_handler.max, one outcome per message (see
// handler.BatchFunc). The queue's concurrency then counts calls.
func (w *Worker) HandleBatch(name string, h handler.BatchFunc) error {
	if name == "" || h == nil {
		return fmt.Errorf("adaptq: HandleBatch(%q): needs a name and a func", name)
	}
	if strings.HasPrefix(name, ExecPrefix) || strings.HasPrefix(name, HTTPPrefix) {
		return fmt.Errorf("adaptq: HandleBatch(%q): names starting with %q or %q are reserved", name, ExecPrefix, HTTPPrefix)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.registeredLocked(name) {
		return fmt.Errorf("adaptq: HandleBatch(%q): already registered", name)
	}
	if w.batchHandlers == nil {
		w.batchHandlers = map[string]handler.BatchFunc{}
	}
	w.batchHandlers[name] = h
	return nil
}

// MustHandleBatch is HandleBatch that panics on error.
func (w *Worker) MustHandleBatch(name string, h handler.BatchFunc) {
	if err := w.HandleBatch(name, h); err != nil {
		panic(err)
	}
}

// registeredLocked reports whether name is taken by Handle or
// HandleBatch. w.mu is held.
func (w *Worker) registeredLocked(name string) bool {
	_, f := w.handlers[name]
	_, b := w.batchHandlers[name]
	return f || b
}

// queueHandler is a queue's handler: one message per call (f) or many (b).
type queueHandler struct {
	f handler.Func
	b handler.BatchFunc
}

// notBatchError: batch_handler is set on a queue whose handler handles
// one message.
type notBatchError struct{ spec string }

func (e *notBatchError) Error() string {
	return fmt.Sprintf("is for a batch handler (Worker.HandleBatch); handler %q handles one message", handlerLabel(e.spec))
}

func errNotBatch(spec string) error { return &notBatchError{spec: spec} }

// handlerProblem is the config problem of a queue's handler that does not
// resolve, under the field at fault.
func handlerProblem(at string, err error) string {
	if _, ok := errors.AsType[*notBatchError](err); ok {
		return fmt.Sprintf("%s.batch_handler: %v", at, err)
	}
	return fmt.Sprintf("%s.handler: %v", at, err)
}

// resolve finds a queue's handler: a batch handler registered under its
// name, or else what handlerFor finds.
func (w *Worker) resolve(qc QueueConfig) (queueHandler, error) {
	name := qc.Handler
	if name == "" {
		name = qc.Name
	}
	w.mu.Lock()
	bh, ok := w.batchHandlers[name]
	w.mu.Unlock()
	if ok {
		return queueHandler{b: bh}, nil
	}
	f, err := w.handlerFor(qc)
	if err != nil {
		return queueHandler{}, err
	}
	if qc.BatchHandler.set() {
		return queueHandler{}, errNotBatch(name)
	}
	return queueHandler{f: f}, nil
}

// newBatchListener makes the listener of a queue with a batch handler:
// metrics outermost, then the worker's batch middlewares, then the
// handler_timeout of each call.
func (w *Worker) newBatchListener(wq *workerQueue, bh handler.BatchFunc, o listener.Options) (*listener.Listener, error) {
	qc := wq.cfg
	if t := qc.NewBatchThreshold; t != nil {
		// Refused rather than ignored (config validation refuses it with
		// batch_handler; a handler registered from Go is known only here).
		return nil, fmt.Errorf("new_batch_threshold: %d is set for a batch handler (Worker.HandleBatch), whose pool bounds its gets: leave it out", *t)
	}
	mws := append([]handler.BatchMiddleware{w.metrics.observeBatch(wq.name, w.clock)}, w.batchMws...)
	if qc.HandlerTimeout > 0 {
		mws = append(mws, handler.TimeoutBatch(qc.HandlerTimeout))
	}
	o.BatchMax, o.BatchWait = qc.BatchHandler.Max, qc.BatchHandler.Wait
	if !qc.concurrencySet && o.Concurrency == listener.DefaultConcurrency {
		// Left out of the file (or, in a Config built in Go, left at
		// DefaultQueueConfig's), the default counts messages: a batch
		// handler's concurrency counts calls. A number written is that
		// many calls, the single handler's default of 64 included.
		o.Concurrency = listener.DefaultBatchConcurrency
	}
	// A new-batch threshold holds back a task's gets while its messages
	// run; a batch handler's pool bounds them instead.
	o.NewBatchThreshold = 0
	return listener.NewBatch(wq.q, handler.ChainBatch(bh, mws...), o)
}

// observeBatch is the batch middleware that times each call (the handler
// duration histogram: one observation per call), counts its size, and
// records each message's dequeue count.
func (m *metrics) observeBatch(name string, c clock.Clock) handler.BatchMiddleware {
	dur := m.handlerDuration.WithLabelValues(name)
	dq := m.dequeueCount.WithLabelValues(name)
	size := m.batchSize.WithLabelValues(name)
	return func(next handler.BatchFunc) handler.BatchFunc {
		return func(ctx context.Context, ms []*queue.Message) []error {
			for _, msg := range ms {
				dq.Observe(float64(msg.DequeueCount))
			}
			size.Observe(float64(len(ms)))
			start := c.Now()
			defer func() { dur.Observe(c.Now().Sub(start).Seconds()) }()
			return next(ctx, ms)
		}
	}
}

// newBatchSizeHistogram is the batch size histogram of a worker's metrics.
func newBatchSizeHistogram() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "adaptq_handler_batch_size",
		Help:    "Messages handed to one batch handler call.",
		Buckets: BatchSizeBuckets,
	}, []string{"queue"})
}
