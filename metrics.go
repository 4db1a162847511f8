package adaptq

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/meter"
)

// How often /metrics reads a queue's depth. A depth is one backend call,
// and on a billed backend (Azure, SQS: Features().Billed) a billed
// transaction, so a scrape never calls the backend itself: it shows the
// depth read at most this long ago. 15 s is Prometheus's usual scrape
// interval, so a free backend is read about once a scrape; a billed one
// once a minute costs 43,200 calls a month, $0.04 at the Best Practices
// article's $0.01 per 10,000.
const (
	DepthIntervalFree   = 15 * time.Second
	DepthIntervalBilled = time.Minute
)

// depthReadTimeout bounds one depth read made during a scrape, well inside
// the admin endpoint's write timeout.
const depthReadTimeout = 5 * time.Second

// HandlerDurationBuckets are the upper bounds, in seconds, of the handler
// duration histogram: from a fast in-process handler (1 ms) to a slow
// external one (the 30 s default visibility timeout and beyond).
var HandlerDurationBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

// DequeueCountBuckets are the upper bounds of the dequeue count histogram:
// every count up to Azure Functions' MaxDequeueCount of 5 (the default
// max_dequeue_count), then coarser.
var DequeueCountBuckets = []float64{1, 2, 3, 4, 5, 10, 20}

// metrics are a worker's Prometheus metrics, on a registry of its own so
// that two workers in one process do not clash: the Go and process
// collectors, the two histograms the handler wrapper observes, and a
// collector that reads the listeners' counters, the meters and the depth
// caches at scrape time (nothing on the hot path, nothing counted twice).
type metrics struct {
	reg             *prometheus.Registry
	handlerDuration *prometheus.HistogramVec
	dequeueCount    *prometheus.HistogramVec
	batchSize       *prometheus.HistogramVec // batch handlers' calls
}

func newMetrics(w *Worker) *metrics {
	m := &metrics{
		reg:       prometheus.NewRegistry(),
		batchSize: newBatchSizeHistogram(),
		handlerDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "adaptq_handler_duration_seconds",
			Help:    "Time a handler took per call (one message, or a batch handler's many), success or failure.",
			Buckets: HandlerDurationBuckets,
		}, []string{"queue"}),
		dequeueCount: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "adaptq_handler_dequeue_count",
			Help:    "Dequeue count of the messages handed to the handler (1: first delivery).",
			Buckets: DequeueCountBuckets,
		}, []string{"queue"}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.handlerDuration, m.dequeueCount, m.batchSize,
		&workerCollector{w: w},
	)
	return m
}

// Metrics is the worker's Prometheus registry, a registry of its own: what
// GET /metrics serves (admin.MetricsPath). A program that serves its own
// metrics can gather it there too.
func (w *Worker) Metrics() prometheus.Gatherer { return w.metrics.reg }

// observe is the middleware that times each message's handler and records
// its dequeue count, by the worker's clock.
func (m *metrics) observe(name string, c clock.Clock) handler.Middleware {
	dur := m.handlerDuration.WithLabelValues(name)
	dq := m.dequeueCount.WithLabelValues(name)
	return func(next handler.Func) handler.Func {
		return func(ctx context.Context, msg *queue.Message) error {
			dq.Observe(float64(msg.DequeueCount))
			start := c.Now()
			defer func() { dur.Observe(c.Now().Sub(start).Seconds()) }()
			return next(ctx, msg)
		}
	}
}

// depthCache reads a queue's depth at most once per interval, when asked
// (a scrape), and keeps the last successful reading and its time. A failed
// read is retried after the interval too (the meter counts it as a count
// call's error); the metrics then show the last good reading.
type depthCache struct {
	q     *queue.Queue
	clock clock.Clock
	every time.Duration

	mu     sync.Mutex
	tried  time.Time // the last read, successful or not
	d      queue.Depth
	readAt time.Time // when d was read; zero before the first success
}

func newDepthCache(q *queue.Queue, c clock.Clock) *depthCache {
	every := DepthIntervalFree
	if q.Features().Billed {
		every = DepthIntervalBilled
	}
	return &depthCache{q: q, clock: c, every: every}
}

// get returns the newest depth, reading it first if the last read is an
// interval old. ok is false before the first successful read.
func (c *depthCache) get() (d queue.Depth, readAt time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if c.tried.IsZero() || now.Sub(c.tried) >= c.every {
		c.tried = now
		ctx, cancel := context.WithTimeout(context.Background(), depthReadTimeout)
		nd, err := c.q.Depth(ctx)
		cancel()
		if err == nil {
			c.d, c.readAt = nd, now
		}
	}
	return c.d, c.readAt, !c.readAt.IsZero()
}

// workerCollector exports what the worker's listeners and meters already
// count, read at scrape time.
type workerCollector struct{ w *Worker }

var (
	labelQueue     = []string{"queue"}
	labelQueueKind = []string{"queue", "kind"}

	descProcessed = prometheus.NewDesc("adaptq_messages_processed_total",
		"Messages whose handler returned success.", labelQueue, nil)
	descFailed = prometheus.NewDesc("adaptq_messages_failed_total",
		"Handler calls that returned an error or panicked; the message is retried.", labelQueue, nil)
	descPoisoned = prometheus.NewDesc("adaptq_messages_poisoned_total",
		"Messages moved to the poison queue.", labelQueue, nil)
	descDeleted = prometheus.NewDesc("adaptq_messages_deleted_total",
		"Messages deleted from the queue after success.", labelQueue, nil)
	descHeld = prometheus.NewDesc("adaptq_messages_held",
		"Messages this worker has fetched and not yet finished.", labelQueue, nil)

	descDepth = prometheus.NewDesc("adaptq_queue_messages",
		"Messages in the queue, visible and in flight, as last read (see adaptq_queue_depth_read_timestamp_seconds).", labelQueue, nil)
	descVisible = prometheus.NewDesc("adaptq_queue_visible_messages",
		"Messages in the queue a get would return now; only where the backend tells them apart.", labelQueue, nil)
	descInFlight = prometheus.NewDesc("adaptq_queue_in_flight_messages",
		"Messages in the queue hidden now (held by a consumer, or put with a delay); only where the backend tells them apart.", labelQueue, nil)
	descOldest = prometheus.NewDesc("adaptq_queue_oldest_message_age_seconds",
		"Age of the oldest message in the queue (0 when empty); only where the backend can tell cheaply.", labelQueue, nil)
	descDepthRead = prometheus.NewDesc("adaptq_queue_depth_read_timestamp_seconds",
		"When the depth shown was read from the backend (Unix time).", labelQueue, nil)

	descActive = prometheus.NewDesc("adaptq_tasks_active",
		"Dequeue tasks running.", labelQueue, nil)
	descIdle = prometheus.NewDesc("adaptq_tasks_idle",
		"Dequeue tasks sleeping after an empty get.", labelQueue, nil)
	descStarted = prometheus.NewDesc("adaptq_tasks_started_total",
		"Dequeue tasks ever started.", labelQueue, nil)

	descCalls = prometheus.NewDesc("adaptq_backend_calls_total",
		"Calls to the queue backend by kind (the queue's and its poison queue's), failed ones included.", labelQueueKind, nil)
	descCallErrors = prometheus.NewDesc("adaptq_backend_call_errors_total",
		"Calls to the queue backend that failed, by kind.", labelQueueKind, nil)
	descCost = prometheus.NewDesc("adaptq_backend_cost_dollars_total",
		"Estimated cost of the backend calls in US dollars, at the configured price per 10,000.", labelQueue, nil)

	descLastGet = prometheus.NewDesc("adaptq_last_get_success_timestamp_seconds",
		"When a get last succeeded, empty or not (Unix time); absent before the first.", labelQueue, nil)
	descReady = prometheus.NewDesc("adaptq_queue_ready",
		"1 if the queue counts as ready (see /readyz), else 0.", labelQueue, nil)

	descExecNotLogged = prometheus.NewDesc("adaptq_exec_output_lines_not_logged_total",
		"Lines of an exec: handler's output left out of the log by its rate limit (log.exec_output); only for queues with such a handler and limit.", labelQueue, nil)
)

var workerDescs = []*prometheus.Desc{
	descProcessed, descFailed, descPoisoned, descDeleted, descHeld,
	descDepth, descVisible, descInFlight, descOldest, descDepthRead,
	descActive, descIdle, descStarted,
	descCalls, descCallErrors, descCost,
	descLastGet, descReady, descExecNotLogged,
}

// Describe sends every metric's description (prometheus.Collector).
func (c *workerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range workerDescs {
		ch <- d
	}
}

// Collect reads every running queue's counters, meter and cached depth
// (prometheus.Collector).
func (c *workerCollector) Collect(ch chan<- prometheus.Metric) {
	w := c.w
	w.mu.Lock()
	qs := append([]*workerQueue(nil), w.queues...)
	w.mu.Unlock()
	now := w.clock.Now()
	for _, wq := range qs {
		name := wq.name
		counter := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, append([]string{name}, labels...)...)
		}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, name)
		}
		st := wq.l.LocalState()
		counter(descProcessed, float64(st.Processed))
		counter(descFailed, float64(st.Failed))
		counter(descPoisoned, float64(st.Poisoned))
		counter(descDeleted, float64(st.Deleted))
		gauge(descHeld, float64(st.InFlight))
		gauge(descActive, float64(st.ActiveTasks))
		gauge(descIdle, float64(st.IdleTasks))
		counter(descStarted, float64(st.TotalTasks))
		if !st.LastGet.IsZero() {
			gauge(descLastGet, unixSeconds(st.LastGet))
		}
		ready := 0.0
		if queueReady(wq.l.Options(), st.Stats, st.InFlight, now) == "" {
			ready = 1
		}
		gauge(descReady, ready)
		if lim := w.execLimit(name); lim != nil {
			counter(descExecNotLogged, float64(lim.NotLogged()))
		}
		collectFlow(wq, func(d *prometheus.Desc, v float64) { counter(d, v) }, gauge)

		m := wq.meter.Snapshot()
		for _, k := range meter.Kinds() {
			counter(descCalls, float64(m.Calls[k]), k.String())
			counter(descCallErrors, float64(m.Errors[k]), k.String())
		}
		counter(descCost, m.Cost())

		if wq.depth == nil {
			continue
		}
		d, readAt, ok := wq.depth.get()
		if !ok {
			continue
		}
		gauge(descDepth, float64(d.Messages))
		gauge(descDepthRead, unixSeconds(readAt))
		if d.Split {
			gauge(descVisible, float64(d.Visible))
			gauge(descInFlight, float64(d.InFlight))
			age := 0.0
			if !d.Oldest.IsZero() {
				age = max(readAt.Sub(d.Oldest).Seconds(), 0)
			}
			if !d.Oldest.IsZero() || d.Messages == 0 {
				gauge(descOldest, age)
			}
		}
	}
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
