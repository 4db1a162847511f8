package scaling

import (
	"fmt"
	"sync"
	"time"
)

// Adaptive concurrency defaults.
const (
	// DefaultAIMDBackoff is the share of the limit kept on an overload
	// signal: Netflix's concurrency-limits AIMDLimit backs off to 0.9. A
	// deeper cut (TCP Reno's 0.5) would leave the limit half the time
	// below 75 % of the downstream's capacity; 0.9 keeps it within 10 %
	// once it has found it, at the price of a few more cuts (one a round
	// trip) after the capacity falls.
	DefaultAIMDBackoff = 0.9
	// DefaultAIMDTolerance: a success slower than this many times the
	// usual handler time does not raise the limit (latency no longer
	// holds: the downstream is queueing). Twice, as Netflix's Gradient
	// limit's default tolerance.
	DefaultAIMDTolerance = 2.0
	// aimdBaselineAlpha weighs each success in the usual handler time: a
	// slow moving average, so that a slowdown shows against it for a
	// while (about 50 handler calls).
	aimdBaselineAlpha = 0.02
)

// Outcome is what one handler call tells an adaptive limit.
type Outcome int

const (
	// Succeeded: the handler returned nil.
	Succeeded Outcome = iota
	// Overloaded: the downstream said it was overloaded
	// (handler.IsOverloaded: a 429 or 503, Retry-After, a timeout, the
	// handler.Overloaded marker).
	Overloaded
	// Failed: any other failure, which says nothing of the downstream's
	// load.
	Failed
)

// AIMDOptions configure an AIMD limit. Zero fields take the defaults.
type AIMDOptions struct {
	// Min and Max bound the limit (defaults 1 and 64).
	Min, Max int
	// Initial is the limit to start from (default Min: start low and
	// climb, as TCP's slow start does not, so a sick downstream is not
	// flooded by a worker that starts).
	Initial int
	// Backoff is the share of the limit kept on an overload signal, in
	// (0, 1) (DefaultAIMDBackoff).
	Backoff float64
	// Tolerance is how many times the usual handler time a success may
	// take and still raise the limit, at least 1 (DefaultAIMDTolerance).
	Tolerance float64
}

// AIMD is an adaptive concurrency limit in the spirit of TCP's congestion
// window: additive increase, multiplicative decrease. Every success that
// finds the limit in use (at least half of it in flight) and latency
// holding (at most Tolerance times the usual handler time) adds 1/limit,
// so the limit grows by about one per limit's worth of successes, a round
// trip; an overload signal from a call started since the last cut
// multiplies it by Backoff (calls already under way when it was cut say
// nothing of the new limit, so one round trip of overload cuts once).
// Other failures change nothing. It is safe for concurrent use; time is
// passed in, so a simulation or a test drives it in virtual time.
type AIMD struct {
	mu      sync.Mutex
	o       AIMDOptions
	limit   float64
	lastCut time.Time
	usual   float64 // moving average of successes' durations, ns; 0: none yet
	cuts    int64
	signals int64
}

func (o AIMDOptions) withDefaults() AIMDOptions {
	if o.Min == 0 {
		o.Min = 1
	}
	if o.Max == 0 {
		o.Max = 64
	}
	if o.Initial == 0 {
		o.Initial = o.Min
	}
	if o.Backoff == 0 {
		o.Backoff = DefaultAIMDBackoff
	}
	if o.Tolerance == 0 {
		o.Tolerance = DefaultAIMDTolerance
	}
	return o
}

// Validate names the first bad field and its value.
func (o AIMDOptions) Validate() error {
	o = o.withDefaults()
	switch {
	case o.Min < 1:
		return fmt.Errorf("scaling: min: %d is below 1", o.Min)
	case o.Max < o.Min:
		return fmt.Errorf("scaling: max: %d is below min %d", o.Max, o.Min)
	case o.Initial < o.Min || o.Initial > o.Max:
		return fmt.Errorf("scaling: initial: %d is outside min..max (%d..%d)", o.Initial, o.Min, o.Max)
	case !(o.Backoff > 0 && o.Backoff < 1): // NaN too
		return fmt.Errorf("scaling: backoff: %v is outside (0, 1)", o.Backoff)
	case !(o.Tolerance >= 1): // NaN too
		return fmt.Errorf("scaling: tolerance: %v is below 1", o.Tolerance)
	}
	return nil
}

// NewAIMD returns a limit at o.Initial.
func NewAIMD(o AIMDOptions) (*AIMD, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	return &AIMD{o: o, limit: float64(o.Initial)}, nil
}

// Options returns the options in effect, defaults filled in.
func (a *AIMD) Options() AIMDOptions { return a.o }

// Limit is the concurrency allowed now: at least Min, at most Max.
func (a *AIMD) Limit() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return int(a.limit)
}

// Cuts is how many times an overload signal lowered the limit; Signals how
// many overload signals were observed (those from calls started before
// the last cut included).
func (a *AIMD) Cuts() (cuts, signals int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cuts, a.signals
}

// Observe records one handler call that started at started and took d,
// with inFlight calls in flight when it ended (itself included), and
// reports whether the limit changed. now is when it ended.
func (a *AIMD) Observe(started time.Time, d time.Duration, oc Outcome, inFlight int, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	before := int(a.limit)
	switch oc {
	case Succeeded:
		holds := a.usual == 0 || float64(d) <= a.o.Tolerance*a.usual
		if a.usual == 0 {
			a.usual = float64(d)
		} else {
			a.usual += aimdBaselineAlpha * (float64(d) - a.usual)
		}
		if holds && 2*inFlight >= int(a.limit) {
			a.limit = min(a.limit+1/a.limit, float64(a.o.Max))
		}
	case Overloaded:
		a.signals++
		if started.Before(a.lastCut) {
			break // sent under the limit before the last cut
		}
		a.limit = max(a.limit*a.o.Backoff, float64(a.o.Min))
		if int(a.limit) == before && before > a.o.Min {
			a.limit = float64(before - 1) // a cut always lowers a limit above Min
		}
		a.lastCut = now
		a.cuts++
	}
	return int(a.limit) != before
}
