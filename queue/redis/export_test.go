package redis

// SweepChunk is the most expired messages one script drops, for the tests
// that bound the work of one call.
const SweepChunk = sweepChunk
