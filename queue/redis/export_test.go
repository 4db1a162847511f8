package redis

import "time"

// SweepChunk is the most expired messages one script drops, for the tests
// that bound the work of one call.
const SweepChunk = sweepChunk

// SetSkew makes the process's clock, as the driver reads it, run d ahead.
func SetSkew(d time.Duration) { skew.Store(int64(d)) }

// PutResendWindow is how long after its first send Put still sends a put
// again.
const PutResendWindow = putResendWindow

// TombstoneLife is how long a deleted message's id is kept.
const TombstoneLife = tombstoneLife

// SetMonoNow replaces the clock of c's Put resend window. Set it before
// the client's first call.
func SetMonoNow(c *Client, f func() time.Time) { c.mono = f }

// OnWakerPause makes c's waker call f with the pause before each of its
// reconnections. Set it before the first subscriber.
func OnWakerPause(c *Client, f func(time.Duration)) { c.wake.onPause = f }

// WakeTimers is how many timers c's waker keeps to signal delayed messages
// visible.
func WakeTimers(c *Client) int {
	c.wake.mu.Lock()
	defer c.wake.mu.Unlock()
	if c.wake.run == nil {
		return 0
	}
	n := 0
	for _, ts := range c.wake.run.timers {
		n += len(ts)
	}
	return n
}

// MaxWakeTimers is the most timers the waker keeps per queue.
const MaxWakeTimers = maxWakeTimers
