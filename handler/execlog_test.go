//go:build unix

package handler_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
)

const execOutput = "handler: exec output"

// outputLines returns the line fields of the logged output of one stream.
func outputLines(logs *observer.ObservedLogs, stream string) []string {
	var lines []string
	for _, e := range logs.FilterMessage(execOutput).FilterField(zap.String("stream", stream)).All() {
		lines = append(lines, e.ContextMap()["line"].(string))
	}
	return lines
}

func TestExecLogsEachOutputLineWithTheMessage(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	h := mustExec(t, sh(`echo out1; echo err1 >&2; printf 'out2\r\n'; echo; printf 'err-partial' >&2; printf out-partial; exit 3`),
		handler.ExecOptions{Queue: "orders", Log: zap.New(core)})
	err := h(context.Background(), &queue.Message{ID: "msg-7", DequeueCount: 2})
	var xe *handler.ExitError
	if !errors.As(err, &xe) || xe.Code != 3 || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("err = %v, want exit status 3", err)
	}
	if got, want := outputLines(logs, "stdout"), []string{"out1", "out2", "", "out-partial"}; !slices.Equal(got, want) {
		t.Errorf("stdout lines %q, want %q", got, want)
	}
	if got, want := outputLines(logs, "stderr"), []string{"err1", "err-partial"}; !slices.Equal(got, want) {
		t.Errorf("stderr lines %q, want %q", got, want)
	}
	for _, e := range logs.All() {
		f := e.ContextMap()
		if e.Level != zapcore.InfoLevel || f["msg_id"] != "msg-7" || f["dequeue_count"] != int64(2) || f["queue"] != "orders" {
			t.Errorf("output line %s %v, want info with msg_id msg-7, dequeue_count 2, queue orders", e.Level, f)
		}
	}
	// The tail of standard error is still in the error.
	if !strings.Contains(err.Error(), "err-partial") {
		t.Errorf("err = %v, lacks the stderr tail", err)
	}
}

func TestExecLogLinesAreBounded(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	// A line of 10,000 'x' then "é" across the bound, then a short line.
	long := 10_000
	h := mustExec(t, sh(fmt.Sprintf(`head -c %d /dev/zero | tr '\0' x; printf '\n'; head -c %d /dev/zero | tr '\0' y; printf 'é\nshort\n'`, long, handler.MaxLogLine-1)),
		handler.ExecOptions{Log: zap.New(core)})
	if err := h(context.Background(), &queue.Message{ID: "m"}); err != nil {
		t.Fatal(err)
	}
	es := logs.FilterMessage(execOutput).All()
	if len(es) != 3 {
		t.Fatalf("%d lines logged, want 3", len(es))
	}
	first, second, third := es[0].ContextMap(), es[1].ContextMap(), es[2].ContextMap()
	if l := first["line"].(string); l != strings.Repeat("x", handler.MaxLogLine) || first["truncated_bytes"] != int64(long-handler.MaxLogLine) {
		t.Errorf("long line logged as %d bytes, truncated_bytes %v; want %d and %d", len(l), first["truncated_bytes"], handler.MaxLogLine, long-handler.MaxLogLine)
	}
	// "é" is two bytes, the second past the bound: neither is kept.
	if l := second["line"].(string); l != strings.Repeat("y", handler.MaxLogLine-1) || second["truncated_bytes"] != int64(2) {
		t.Errorf("line cut inside a character: %d bytes ending %q, truncated_bytes %v", len(l), l[len(l)-2:], second["truncated_bytes"])
	}
	if third["line"] != "short" || third["truncated_bytes"] != nil {
		t.Errorf("the line after a long one: %v", third)
	}
}

func TestExecLogAndWritersTogether(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	var out bytes.Buffer
	h := mustExec(t, sh(`echo hello`), handler.ExecOptions{Log: zap.New(core), Stdout: &out})
	if err := h(context.Background(), &queue.Message{ID: "m"}); err != nil {
		t.Fatal(err)
	}
	if got := outputLines(logs, "stdout"); !slices.Equal(got, []string{"hello"}) {
		t.Errorf("logged %q", got)
	}
	if out.String() != "hello\n" {
		t.Errorf("Stdout got %q", out.String())
	}
}

func TestExecLogsNothingAboveInfo(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.WarnLevel)
	h := mustExec(t, sh(`echo quiet; echo quiet >&2`), handler.ExecOptions{Log: zap.New(core)})
	if err := h(context.Background(), &queue.Message{ID: "m"}); err != nil {
		t.Fatal(err)
	}
	if logs.Len() != 0 {
		t.Errorf("logged at warn level: %v", logs.All())
	}
}

// The stderr line that becomes a failure's reason is also logged as an
// output line: both are redacted.
func TestExecOutputLinesAreRedacted(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	h := mustExec(t, sh(`echo "GET https://a.blob.core.windows.net/c?sig=SIGSECRET" >&2; echo "password=PWSECRET"; exit 3`),
		handler.ExecOptions{Log: zap.New(core)})
	_ = h(context.Background(), &queue.Message{ID: "m", DequeueCount: 1})
	lines := append(outputLines(logs, "stderr"), outputLines(logs, "stdout")...)
	if len(lines) != 2 {
		t.Fatalf("lines %q", lines)
	}
	for _, l := range lines {
		if strings.Contains(l, "SECRET") || !strings.Contains(l, "REDACTED") {
			t.Errorf("output line %q: want it redacted", l)
		}
	}
}
