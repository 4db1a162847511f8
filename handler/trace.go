package handler

import (
	"context"
	"strings"
)

// Propagation passes a handler context's trace on to the programs and
// services a handler calls: Exec sets TRACEPARENT (and TRACESTATE, and any
// other field the propagator writes, upper-cased) in the command's
// environment, and HTTP sends the traceparent header (and the others), as
// OpenTelemetry's W3C Trace Context propagation names them. Package
// tracing puts one on each handler context when the listener traces; this
// package itself imports no tracing library, and a context without one
// passes nothing.
type Propagation func(ctx context.Context, set func(key, value string))

type propagationKey struct{}

// WithPropagation returns ctx carrying p.
func WithPropagation(ctx context.Context, p Propagation) context.Context {
	return context.WithValue(ctx, propagationKey{}, p)
}

// Propagate calls set with each trace context field ctx's Propagation
// writes for the trace ctx carries; nothing when ctx has no Propagation.
func Propagate(ctx context.Context, set func(key, value string)) {
	if p, ok := ctx.Value(propagationKey{}).(Propagation); ok && p != nil {
		p(ctx, set)
	}
}

// traceEnv is the environment entries of ctx's trace context: each field
// upper-cased ("traceparent" → "TRACEPARENT"), with characters other than
// letters, digits and _ as _, as OpenTelemetry's environment carrier
// names them.
func traceEnv(ctx context.Context) []string {
	var env []string
	Propagate(ctx, func(k, v string) {
		env = append(env, envName(k)+"="+v)
	})
	return env
}

func envName(k string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			return r
		}
		return '_'
	}, k)
}
