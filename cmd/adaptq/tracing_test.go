package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace/noop"
)

// adaptq run with an OTLP endpoint (a receiver on loopback) in the
// environment: the exec handler gets a TRACEPARENT, and the spans reach
// the endpoint by the time run returns. Not parallel: it sets the
// process's environment and OpenTelemetry's globals.
func TestRunExportsSpansToTheOTLPEndpoint(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("exec: sh")
	}
	var mu sync.Mutex
	posts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/traces" {
			mu.Lock()
			posts++
			mu.Unlock()
		}
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Cleanup(func() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
	})

	dir := t.TempDir()
	out := filepath.Join(dir, "traceparent.txt")
	cfg := writeConfig(t, dir, `
log: {level: error}
admin: {address: ""}
queues:
  - url: sqlite://$DIR/q.db?queue=orders
    handler: "exec: sh -c 'printf \"%s\\n\" \"$TRACEPARENT\" >> `+out+`'"
    idle: {max: 200ms}
`)
	mustCLI(t, "job", "enqueue", "-c", cfg, "--lines", "-")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code, stdout, stderr := startRun(ctx, t, nil, "-c", cfg)
	waitUntil(t, "the worker handled the message", func() bool {
		data, _ := os.ReadFile(out)
		return len(data) > 0
	})
	cancel()
	if c := exitCodeWithin(t, code, stderr); c != exitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", c, stdout, stderr)
	}
	data, _ := os.ReadFile(out)
	if !regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`).MatchString(strings.TrimSpace(string(data))) {
		t.Errorf("TRACEPARENT %q, want a sampled W3C traceparent", data)
	}
	mu.Lock()
	defer mu.Unlock()
	if posts == 0 {
		t.Error("no spans reached the OTLP endpoint")
	}
}

func TestRunRefusesAnUnsupportedExporter(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	dir := t.TempDir()
	cfg := writeConfig(t, dir, `
log: {level: error}
admin: {address: ""}
queues:
  - url: sqlite://$DIR/q.db?queue=orders
    handler: "exec: cat"
`)
	code, stdout, stderr := startRun(context.Background(), t, nil, "-c", cfg)
	if c := exitCodeWithin(t, code, stderr); c != exitUsage || !strings.Contains(stderr.String(), `OTEL_TRACES_EXPORTER: "zipkin"`) {
		t.Fatalf("exit %d, want %d naming the variable\nstdout: %s\nstderr: %s", c, exitUsage, stdout, stderr)
	}
}
