package main

import (
	"os"
	"strings"
	"testing"
)

// TestMain clears the machine's OTEL_* variables before any test runs: the
// commands enable OTLP export from them (tracing/otlpenv), so a
// developer's own collector endpoint would otherwise receive the tests'
// spans, or send them off loopback. Tests that need one set it with
// t.Setenv, to a receiver of their own on loopback.
func TestMain(m *testing.M) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "OTEL_") {
			os.Unsetenv(name)
		}
	}
	os.Exit(m.Run())
}
