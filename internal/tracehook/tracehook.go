// Package tracehook carries the tracing that package tracing registers
// (tracing.Register, which its import does with OpenTelemetry's global
// provider and propagator) to the packages that use it, queue and
// listener, which import no tracing library: a program that does not
// import package tracing pays nothing for OpenTelemetry, in its binary or
// on its hot path. Only package tracing sets these; queue and listener
// read them when a queue or a listener is made.
package tracehook

import "sync/atomic"

var (
	// Queue holds the queue.Tracer that queues made from now on use unless
	// given their own (queue.WithTracer).
	Queue atomic.Value
	// Listener holds a func(*queue.Queue) listener.Tracer: what listeners
	// made from now on use unless given their own (Options.Tracer).
	Listener atomic.Value
)
