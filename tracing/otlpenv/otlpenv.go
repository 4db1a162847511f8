// Package otlpenv sets up OpenTelemetry tracing from the standard OTEL_*
// environment variables, as `adaptq run` does: spans batched to an
// OTLP/HTTP exporter, W3C trace context and baggage propagation. A program
// that embeds adaptq may call Setup too, or set up its own provider (see
// the README); adaptq itself never configures an exporter unasked.
//
// Setup turns tracing on only when the environment asks for it:
// OTEL_TRACES_EXPORTER=otlp, or OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set while OTEL_TRACES_EXPORTER is
// unset. OTEL_TRACES_EXPORTER=none and OTEL_SDK_DISABLED=true turn it off.
// The exporter reads the rest of the OTEL_EXPORTER_OTLP_* variables
// (headers, timeout, compression, certificates), the SDK reads
// OTEL_TRACES_SAMPLER and OTEL_BSP_*, and the resource reads
// OTEL_SERVICE_NAME (default DefaultServiceName) and
// OTEL_RESOURCE_ATTRIBUTES. OTEL_PROPAGATORS may name tracecontext,
// baggage or none (default tracecontext,baggage). Only the OTLP/HTTP
// protocol (http/protobuf) is built in.
package otlpenv

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
)

// DefaultServiceName is service.name when neither OTEL_SERVICE_NAME nor
// OTEL_RESOURCE_ATTRIBUTES names one.
const DefaultServiceName = "adaptq"

// Enabled reports whether getenv's OTEL_* variables ask for OTLP traces,
// or an error naming a variable whose value Setup cannot honour.
func Enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false, nil
	case "otlp":
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return false, nil
		}
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER: %q is not supported (otlp or none)", exp)
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(k)); p != "" {
			if p != "http/protobuf" {
				return false, fmt.Errorf("%s: %q is not supported (http/protobuf)", k, p)
			}
			break
		}
	}
	if _, err := propagators(getenv("OTEL_PROPAGATORS")); err != nil {
		return false, err
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		if err := checkHeaders(k, getenv(k)); err != nil {
			return false, err
		}
	}
	return true, nil
}

// checkHeaders refuses a headers variable (comma-separated key=value,
// values percent-encoded) that the exporter would not read whole: it
// would log the malformed entry, credential and all, and go on without
// it. The error names the entry by its place and its key when that is a
// valid header name, never the value.
func checkHeaders(name, v string) error {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	for i, entry := range strings.Split(v, ",") {
		if strings.TrimSpace(entry) == "" {
			continue
		}
		k, val, ok := strings.Cut(entry, "=")
		k = strings.TrimSpace(k)
		if !ok || !validHeaderKey(k) {
			return fmt.Errorf("%s: entry %d is not key=value with a header name for key (value not shown)", name, i+1)
		}
		if _, err := url.PathUnescape(val); err != nil {
			return fmt.Errorf("%s: entry %d (%q): the value is not percent-encoded (value not shown)", name, i+1, k)
		}
	}
	return nil
}

// validHeaderKey reports whether k is an HTTP header name (RFC 9110's
// token), as the exporter requires.
func validHeaderKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func propagators(v string) (propagation.TextMapPropagator, error) {
	if strings.TrimSpace(v) == "" {
		v = "tracecontext,baggage"
	}
	var ps []propagation.TextMapPropagator
	for _, name := range strings.Split(v, ",") {
		switch name = strings.TrimSpace(name); name {
		case "tracecontext":
			ps = append(ps, propagation.TraceContext{})
		case "baggage":
			ps = append(ps, propagation.Baggage{})
		case "none":
		default:
			return nil, fmt.Errorf("OTEL_PROPAGATORS: %q is not supported (tracecontext, baggage, none)", name)
		}
	}
	return propagation.NewCompositeTextMapPropagator(ps...), nil
}

// Setup sets the global TracerProvider and TextMapPropagator from the
// process's environment when it asks for OTLP traces (see Enabled), and
// returns shutdown, which flushes the spans still batched and stops the
// exporter. When the environment does not ask, Setup changes nothing and
// shutdown does nothing.
func Setup(ctx context.Context) (enabled bool, shutdown func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	on, err := Enabled(os.Getenv)
	if err != nil || !on {
		return false, noop, err
	}
	prop, _ := propagators(os.Getenv("OTEL_PROPAGATORS"))
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return false, noop, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	// The SDK's resource reads OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES; without either naming a service, it would
	// say unknown_service.
	res := resource.Default()
	if os.Getenv("OTEL_SERVICE_NAME") == "" && !strings.Contains(os.Getenv("OTEL_RESOURCE_ATTRIBUTES"), string(semconv.ServiceNameKey)+"=") {
		if r, err := resource.Merge(res, resource.NewSchemaless(semconv.ServiceName(DefaultServiceName))); err == nil {
			res = r
		}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(prop)
	return true, tp.Shutdown, nil
}
