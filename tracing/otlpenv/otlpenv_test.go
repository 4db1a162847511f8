package otlpenv_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"

	"github.com/adaptq/adaptq/tracing/otlpenv"
)

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		env     map[string]string
		want    bool
		wantErr string
	}{
		{env: nil},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, want: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, want: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: `OTEL_TRACES_EXPORTER: "zipkin"`},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, wantErr: `OTEL_EXPORTER_OTLP_PROTOCOL: "grpc"`},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, want: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_PROPAGATORS": "tracecontext,b3"}, wantErr: `OTEL_PROPAGATORS: "b3"`},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_HEADERS": "api-key=s3cret, x-b = a%20b ,"}, want: true},
		// A malformed entry is refused naming the variable and the entry's
		// place, never its value: the exporter would log the value (the
		// credential, typically) to stderr and send nothing with it.
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_HEADERS": "a=b,Authorization:Bearer s3cret"}, wantErr: "OTEL_EXPORTER_OTLP_HEADERS: entry 2"},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "Authorization=Bearer%zzs3cret"}, wantErr: `OTEL_EXPORTER_OTLP_TRACES_HEADERS: entry 1 ("Authorization")`},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_HEADERS": "Bearer s3cret=x"}, wantErr: "OTEL_EXPORTER_OTLP_HEADERS: entry 1"},
	} {
		got, err := otlpenv.Enabled(func(k string) string { return c.env[k] })
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%v: the error shows the secret: %v", c.env, err)
		}
		if got != c.want || (err == nil) != (c.wantErr == "") || (err != nil && !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("%v: %v, %v; want %v, error with %q", c.env, got, err, c.want, c.wantErr)
		}
	}
}

// Setup with an endpoint on loopback sends the spans there over OTLP/HTTP
// when shut down; the service is named adaptq unless the environment names
// one.
func TestSetupExportsToTheEndpoint(t *testing.T) {
	var mu sync.Mutex
	var paths, types []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		types = append(types, r.Header.Get("Content-Type"))
		mu.Unlock()
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_SDK_DISABLED", "")
	on, shutdown, err := otlpenv.Setup(context.Background())
	if err != nil || !on {
		t.Fatalf("Setup: %v, %v", on, err)
	}
	_, span := otel.Tracer("test").Start(context.Background(), "one")
	span.End()
	if !span.SpanContext().IsSampled() {
		t.Error("the span is not sampled")
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 1 || paths[0] != "/v1/traces" || types[0] != "application/x-protobuf" {
		t.Errorf("requests %v %v, want one POST of protobuf to /v1/traces", paths, types)
	}
}
