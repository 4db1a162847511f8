package scaling

import (
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RateGate paces the messages a listener starts: at most PerSecond a
// second, Burst at once, on golang.org/x/time/rate's token bucket, driven
// with explicit times (AllowN, TokensAt) so that it runs in virtual time.
//
// It is asked before each get, not after: Admit says how many messages
// the get may ask for (the tokens there are now, less those promised to
// gets still on their way), and Commit takes the tokens of the messages
// the get returned. So every message a get returns has its token and
// starts at once: a limited listener never holds a message it may not
// run yet, which other workers could run, and a get that finds fewer
// messages than it asked for (or none: an idle queue) costs no tokens.
type RateGate struct {
	mu      sync.Mutex
	lim     *rate.Limiter
	perSec  float64
	burst   int
	pending int // tokens promised to gets on their way
	last    time.Time
}

// maxRateWait caps the wait Admit returns: a limit of a message a
// century, say, is asked again after a year.
const maxRateWait = 365 * 24 * time.Hour

// DefaultRateBurst is the burst of a rate limit that names none: a
// second's worth of messages, at least 1 and at most most (a listener's
// batch size), so that one get fetches what one second may start.
func DefaultRateBurst(perSecond float64, most int) int {
	if perSecond >= float64(most) { // no int conversion of a huge rate
		return max(1, most)
	}
	return max(1, min(most, int(math.Ceil(perSecond))))
}

// NewRateGate returns a gate of perSecond messages a second, burst at
// once, full at the start.
func NewRateGate(perSecond float64, burst int) (*RateGate, error) {
	switch {
	case !(perSecond > 0) || math.IsInf(perSecond, 0):
		return nil, fmt.Errorf("scaling: per_second: %v is not a positive number", perSecond)
	case burst < 1:
		return nil, fmt.Errorf("scaling: burst: %d is below 1", burst)
	}
	return &RateGate{lim: rate.NewLimiter(rate.Limit(perSecond), burst), perSec: perSecond, burst: burst}, nil
}

// PerSecond and Burst are the gate's limit.
func (g *RateGate) PerSecond() float64 { return g.perSec }
func (g *RateGate) Burst() int         { return g.burst }

// mono keeps the times the limiter sees from going backwards (tasks read
// the clock before they take the gate's lock). g.mu is held.
func (g *RateGate) mono(now time.Time) time.Time {
	if now.Before(g.last) {
		return g.last
	}
	g.last = now
	return now
}

// Admit asks for up to most messages' tokens at now. With at least want
// of them free (want is clamped to 1..min(most, Burst)), it promises n of
// them (want ≤ n ≤ most) to a get and returns n; the caller must Commit
// after the get. Otherwise it returns 0 and how long to wait before
// asking again.
func (g *RateGate) Admit(now time.Time, want, most int) (n int, wait time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now = g.mono(now)
	want = max(1, min(want, most, g.burst))
	free := g.lim.TokensAt(now) - float64(g.pending)
	if free+1e-9 >= float64(want) {
		n = min(most, int(math.Floor(free+1e-9)))
		g.pending += n
		return n, 0
	}
	missing := float64(want) - free
	// A tiny rate's wait may not fit a Duration: cap it, never let the
	// conversion overflow (into a negative wait: a busy loop).
	w := math.Ceil(missing / g.perSec * float64(time.Second))
	if !(w < float64(maxRateWait)) {
		return 0, maxRateWait
	}
	return 0, max(time.Duration(w), time.Nanosecond)
}

// Commit ends the get n tokens were promised to: got messages came back,
// and their tokens are taken now.
func (g *RateGate) Commit(now time.Time, promised, got int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now = g.mono(now)
	g.pending -= promised
	if got > 0 && !g.lim.AllowN(now, got) {
		// Only a clock that stood still and float rounding can get here:
		// the tokens were there when promised and only grow. Take them
		// anyway (a reservation never refuses), so the rate is kept.
		g.lim.ReserveN(now, got)
	}
}
