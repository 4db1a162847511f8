package adaptq

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/listener"
)

// Flow control's metrics (listener.FlowState), read at scrape time like
// the rest.
var (
	descConcLimit = prometheus.NewDesc("adaptq_concurrency_limit",
		"Handlers the queue may run at once now: the adaptive limit (concurrency: auto), or the fixed concurrency.", labelQueue, nil)
	descConcMax = prometheus.NewDesc("adaptq_concurrency_limit_max",
		"The most the concurrency limit may reach (adaptive_concurrency.max, or the fixed concurrency).", labelQueue, nil)
	descConcCuts = prometheus.NewDesc("adaptq_concurrency_cuts_total",
		"Times an overload signal cut the adaptive concurrency limit.", labelQueue, nil)
	descOverloads = prometheus.NewDesc("adaptq_overload_signals_total",
		"Handler calls that failed with an overload signal (HTTP 429 or 503, Retry-After, a timeout, handler.Overloaded); counted under an adaptive limit only.", labelQueue, nil)
	descRateLimit = prometheus.NewDesc("adaptq_rate_limit_per_second",
		"The queue's rate limit in messages a second (rate_limit.per_second); only for limited queues.", labelQueue, nil)
	descRateWaits = prometheus.NewDesc("adaptq_rate_limit_waits_total",
		"Times a dequeue task waited for the rate limit's tokens before a get; only for limited queues.", labelQueue, nil)
)

func init() {
	workerDescs = append(workerDescs, descConcLimit, descConcMax, descConcCuts, descOverloads, descRateLimit, descRateWaits)
}

// collectFlow adds a queue's flow-control metrics.
func collectFlow(wq *workerQueue, counter, gauge func(d *prometheus.Desc, v float64)) {
	f := wq.l.Flow()
	gauge(descConcLimit, float64(f.Limit))
	gauge(descConcMax, float64(f.Max))
	if f.Adaptive {
		counter(descConcCuts, float64(f.Cuts))
		counter(descOverloads, float64(f.Overloads))
	}
	if f.RatePerSecond > 0 {
		gauge(descRateLimit, f.RatePerSecond)
		counter(descRateWaits, float64(f.RateWaits))
	}
}

// flowStats is a listener's flow control as /v1/stats shows it.
func flowStats(f listener.FlowState) admin.Flow {
	return admin.Flow{Adaptive: f.Adaptive, Limit: f.Limit, Min: f.Min, Max: f.Max, Cuts: f.Cuts, Overloads: f.Overloads,
		RatePerSecond: f.RatePerSecond, RateBurst: f.RateBurst, RateWaits: f.RateWaits}
}
