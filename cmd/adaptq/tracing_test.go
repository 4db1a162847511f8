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

	"github.com/adaptq/adaptq/queue"
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

// adaptq enqueue with an OTLP endpoint in the environment: the batch's
// producer span reaches the endpoint by the time enqueue returns, and each
// message carries its trace context. Not parallel, as the run test.
func TestEnqueueExportsSpansToTheOTLPEndpoint(t *testing.T) {
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
	url := "sqlite://" + dir + "/q.db?queue=orders"
	mustCLI(t, "A1\nA2\n", "enqueue", "--url", url, "--lines", "-")
	mu.Lock()
	n := posts
	mu.Unlock()
	if n == 0 {
		t.Error("no spans reached the OTLP endpoint")
	}
	q, err := queue.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ms, err := q.Peek(context.Background(), 2)
	if err != nil || len(ms) != 2 {
		t.Fatalf("peek: %d, %v", len(ms), err)
	}
	traceparent := regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`)
	if tp := ms[0].Metadata["traceparent"]; !traceparent.MatchString(tp) || ms[1].Metadata["traceparent"] != tp {
		t.Errorf("traceparents %q and %q, want the batch's, the same in both", tp, ms[1].Metadata["traceparent"])
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
