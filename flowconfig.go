package adaptq

import (
	"fmt"
	"math"
	"reflect"
	"strconv"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/scaling"
)

// Concurrency is a queue's concurrency: the handlers that may run at
// once, or ConcurrencyAuto.
type Concurrency int

// ConcurrencyAuto ("concurrency: auto") makes a queue's concurrency adapt
// to its downstream (scaling.AIMD): it starts at adaptive_concurrency.min,
// climbs by about one per round trip while handlers succeed and their
// latency holds, and is cut by a tenth on overload signals (HTTP 429 or
// 503, Retry-After, a handler timeout, handler.Overloaded), never outside
// adaptive_concurrency.min..max.
const ConcurrencyAuto Concurrency = -1

const concurrencyAutoText = "auto"

var concurrencyType = reflect.TypeOf(Concurrency(0))

// String is the number, or "auto".
func (c Concurrency) String() string {
	if c == ConcurrencyAuto {
		return concurrencyAutoText
	}
	return strconv.Itoa(int(c))
}

// AdaptiveConcurrencyConfig bounds an adaptive concurrency. 0 takes the
// default: min 1 (start low, so a worker that starts does not flood a
// sick downstream), max listener.DefaultConcurrency (64, the fixed
// default).
type AdaptiveConcurrencyConfig struct {
	Min int `yaml:"min"`
	Max int `yaml:"max"`
}

// RateLimitConfig limits the messages a second a queue's listener hands
// to its handler, in this worker (each worker has its own limit: N
// workers start up to N × per_second). per_second 0 is no limit; burst 0
// is a second's worth, at most batch_size (scaling.DefaultRateBurst).
type RateLimitConfig struct {
	PerSecond float64 `yaml:"per_second"`
	Burst     int     `yaml:"burst"`
}

// validateFlow checks concurrency, adaptive_concurrency and rate_limit.
func (q *QueueConfig) validateFlow(at string) []string {
	var p []string
	add := func(field, format string, args ...any) {
		p = append(p, fmt.Sprintf("%s.%s: ", at, field)+fmt.Sprintf(format, args...))
	}
	a := q.AdaptiveConcurrency
	if q.Concurrency == ConcurrencyAuto {
		lo, hi := q.adaptiveBounds()
		switch {
		case a.Min < 0:
			add("adaptive_concurrency.min", "%d is negative (0: 1)", a.Min)
		case a.Max < 0:
			add("adaptive_concurrency.max", "%d is negative (0: %d)", a.Max, listener.DefaultConcurrency)
		case hi < lo:
			add("adaptive_concurrency.max", "%d is below adaptive_concurrency.min %d", hi, lo)
		}
	} else {
		if q.Concurrency < 1 {
			add("concurrency", "%d is below 1 (or auto, to adapt it)", q.Concurrency)
		}
		if a != (AdaptiveConcurrencyConfig{}) {
			add("adaptive_concurrency", "is set, but concurrency is %s, not auto", q.Concurrency)
		}
	}
	r := q.RateLimit
	switch {
	case r.PerSecond < 0 || math.IsNaN(r.PerSecond) || math.IsInf(r.PerSecond, 0):
		add("rate_limit.per_second", "%v is not a number ≥ 0 (0: no limit)", r.PerSecond)
	case r.Burst < 0:
		add("rate_limit.burst", "%d is negative (0: a second's worth, at most batch_size)", r.Burst)
	case r.Burst > 0 && r.PerSecond == 0:
		add("rate_limit.burst", "%d is set without rate_limit.per_second", r.Burst)
	}
	return p
}

func (q QueueConfig) adaptiveBounds() (lo, hi int) {
	lo, hi = q.AdaptiveConcurrency.Min, q.AdaptiveConcurrency.Max
	if lo == 0 {
		lo = 1
	}
	if hi == 0 {
		hi = max(listener.DefaultConcurrency, lo)
	}
	return lo, hi
}

// concurrency is the listener's Concurrency: the fixed one, or the
// adaptive limit's max.
func (q QueueConfig) concurrency() int {
	if q.Concurrency == ConcurrencyAuto {
		_, hi := q.adaptiveBounds()
		return hi
	}
	return int(q.Concurrency)
}

// adaptive is the listener's Adaptive option: nil unless concurrency is
// auto.
func (q QueueConfig) adaptive() *scaling.AIMDOptions {
	if q.Concurrency != ConcurrencyAuto {
		return nil
	}
	lo, hi := q.adaptiveBounds()
	return &scaling.AIMDOptions{Min: lo, Max: hi}
}

func (q QueueConfig) rateLimit() listener.RateLimit {
	return listener.RateLimit{PerSecond: q.RateLimit.PerSecond, Burst: q.RateLimit.Burst}
}
