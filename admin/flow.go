package admin

import (
	"fmt"
	"strconv"
)

// Flow is a queue's flow control in /v1/stats: the handlers it may run at
// once, how that limit adapts, and its rate limit.
type Flow struct {
	// Adaptive says the concurrency adapts (concurrency: auto); Limit is
	// the concurrency allowed now, Min and Max its bounds (all three the
	// fixed concurrency otherwise).
	Adaptive bool `json:"adaptive"`
	Limit    int  `json:"concurrency_limit"`
	Min      int  `json:"concurrency_min"`
	Max      int  `json:"concurrency_max"`
	// Cuts counts the overload signals that lowered the limit, Overloads
	// the handler calls that failed with one (adaptive only).
	Cuts      int64 `json:"concurrency_cuts"`
	Overloads int64 `json:"overload_signals"`
	// RatePerSecond and RateBurst are the rate limit (0: none); RateWaits
	// the times a task waited for it before a get.
	RatePerSecond float64 `json:"rate_limit_per_second,omitempty"`
	RateBurst     int     `json:"rate_limit_burst,omitempty"`
	RateWaits     int64   `json:"rate_limit_waits,omitempty"`
}

// concurrencyText is the status page's cell: "12 of auto 1–64", or "64".
func (f Flow) concurrencyText() string {
	if f.Adaptive {
		return fmt.Sprintf("%d of auto %d–%d", f.Limit, f.Min, f.Max)
	}
	return strconv.Itoa(f.Limit)
}

// rateText is the rate limit under it: "100/s, burst 32", or "".
func (f Flow) rateText() string {
	if f.RatePerSecond <= 0 {
		return ""
	}
	return fmt.Sprintf("%s/s, burst %d", strconv.FormatFloat(f.RatePerSecond, 'f', -1, 64), f.RateBurst)
}
