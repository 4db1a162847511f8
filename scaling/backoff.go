package scaling

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Idle backoff defaults.
const (
	// DefaultMinIdle is the shortest sleep after an empty get (Azure
	// Functions' queue trigger polls at least every 100 ms).
	DefaultMinIdle = 100 * time.Millisecond
	// DefaultMaxIdle caps the sleep (Azure Functions' maxPollingInterval
	// default, one minute).
	DefaultMaxIdle = time.Minute
	// DefaultIdleDelta is the backoff's unit (the Best Practices article: deltaBackoffMs = 100).
	DefaultIdleDelta = 100 * time.Millisecond
	// JitterMin and JitterMax bound the random factor applied to the
	// exponential part (the Best Practices article: Random.Next(delta·0.8, delta·1.2)).
	JitterMin = 0.8
	JitterMax = 1.2
)

// IdleBackoff is the Best Practices article's randomized exponential idle delay. The zero
// value uses the defaults.
type IdleBackoff struct {
	Min, Max, Delta time.Duration
}

// WithDefaults fills zero fields with the defaults.
func (b IdleBackoff) WithDefaults() IdleBackoff {
	if b.Min == 0 {
		b.Min = DefaultMinIdle
	}
	if b.Max == 0 {
		b.Max = DefaultMaxIdle
	}
	if b.Delta == 0 {
		b.Delta = DefaultIdleDelta
	}
	return b
}

// Validate reports a negative field or a minimum above the maximum.
func (b IdleBackoff) Validate() error {
	switch {
	case b.Min < 0:
		return fmt.Errorf("scaling: idle backoff min %s is negative", b.Min)
	case b.Max < 0:
		return fmt.Errorf("scaling: idle backoff max %s is negative", b.Max)
	case b.Delta < 0:
		return fmt.Errorf("scaling: idle backoff delta %s is negative", b.Delta)
	}
	b = b.WithDefaults()
	if b.Min > b.Max {
		return fmt.Errorf("scaling: idle backoff min %s is above max %s", b.Min, b.Max)
	}
	return nil
}

// DelayWith returns the delay after k empty gets in a row for a given
// jitter factor in [JitterMin, JitterMax]:
// min(Min + (2^k − 1)·jitter·Delta, Max). k ≤ 0 gives Min.
func (b IdleBackoff) DelayWith(k int, jitter float64) time.Duration {
	b = b.WithDefaults()
	if k <= 0 {
		return b.Min
	}
	// In float64 so that 2^k cannot overflow; anything past Max is Max.
	extra := (math.Exp2(float64(k)) - 1) * jitter * float64(b.Delta)
	d := float64(b.Min) + extra
	if d >= float64(b.Max) {
		return b.Max
	}
	return time.Duration(d)
}

// Delay returns the delay after k empty gets in a row, with a random
// jitter factor.
func (b IdleBackoff) Delay(k int) time.Duration {
	return b.DelayWith(k, JitterMin+rand.Float64()*(JitterMax-JitterMin))
}

// ShouldStop is the Best Practices article's stop rule: a task stops once its delay has
// reached the maximum, unless it is the last active one.
func (b IdleBackoff) ShouldStop(delay time.Duration, activeTasks int) bool {
	return delay >= b.WithDefaults().Max && activeTasks > 1
}
