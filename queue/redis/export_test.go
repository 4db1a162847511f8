package redis

import "time"

// SweepChunk is the most expired messages one script drops, for the tests
// that bound the work of one call.
const SweepChunk = sweepChunk

// SetSkew makes the process's clock, as the driver reads it, run d ahead.
func SetSkew(d time.Duration) { skew.Store(int64(d)) }
