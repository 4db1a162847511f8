//go:build unix

package handler_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
)

// openFDs counts the process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(es)
}

// Review of issue 27 item 3: the pipes Exec now owns must not leak a file
// descriptor or a goroutine per message, whether the command succeeds,
// fails, cannot start, or leaves a background process holding its output.
func TestExecReviewNoLeakPerMessage(t *testing.T) {
	core, _ := observer.New(zapcore.InfoLevel)
	limit, err := handler.NewLogLimit(10, time.Hour, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	o := handler.ExecOptions{Log: zap.New(core), LogLimit: limit, Stdout: discard{}, Stderr: discard{}}
	ok := mustExec(t, sh(`echo out; echo err >&2`), o)
	fail := mustExec(t, sh(`echo out; exit 3`), o)
	gone := writeScript(t, t.TempDir(), "gone", "exit 0\n")
	missing := mustExec(t, []string{gone}, o)
	if err := os.Remove(gone); err != nil { // cannot start from now on
		t.Fatal(err)
	}
	run := func(h handler.Func, i int) {
		_ = h(context.Background(), &queue.Message{ID: fmt.Sprint(i), DequeueCount: 1})
	}
	// Warm up: the runtime's own goroutines and fds (poller, signals).
	for i := range 5 {
		run(ok, i)
		run(fail, i)
		run(missing, i)
	}
	fds, gs := openFDs(t), runtime.NumGoroutine()
	for i := range 1000 {
		switch i % 3 {
		case 0:
			run(ok, i)
		case 1:
			run(fail, i)
		default:
			run(missing, i)
		}
	}
	var fds2, gs2 int
	for range 100 { // goroutines that are ending
		fds2, gs2 = openFDs(t), runtime.NumGoroutine()
		if fds2 <= fds+2 && gs2 <= gs+2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if fds2 > fds+2 {
		t.Errorf("open fds %d before 1,000 messages, %d after", fds, fds2)
	}
	if gs2 > gs+2 {
		t.Errorf("goroutines %d before 1,000 messages, %d after", gs, gs2)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// A background process that keeps the pipes open and writes nothing: the
// handler returns after the wait delay, with the command's own line.
func TestExecReviewSilentBackgroundHolder(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	core, logs := observer.New(zapcore.InfoLevel)
	h := mustExec(t, sh(`echo mine; sleep 3600 & echo $! > "$PIDFILE"`),
		handler.ExecOptions{Env: []string{"PIDFILE=" + pidFile}, Log: zap.New(core)})
	if err := runAsync(t, context.Background(), h)(); err != nil {
		t.Fatalf("err = %v", err)
	}
	pid := readPid(t, pidFile)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if lines := outputLines(logs, "stdout"); !slices.Equal(lines, []string{"mine"}) {
		t.Errorf("stdout lines %q, want [mine]", lines)
	}
}

// A command killed at its timeout whose background process left the group
// (setsid) and writes without end: the handler returns, not held.
func TestExecReviewTimeoutWithEscapedWriter(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/bin/setsid"); err != nil {
		t.Skip("no setsid")
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	core, _ := observer.New(zapcore.InfoLevel)
	h := mustExec(t, sh(`setsid sh -c 'echo $$ > "$PIDFILE"; while :; do echo spam; done' & sleep 3600`),
		handler.ExecOptions{Env: []string{"PIDFILE=" + pidFile}, Log: zap.New(core), Timeout: 300 * time.Millisecond})
	err := runAsync(t, context.Background(), h)()
	pid := readPid(t, pidFile)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if err == nil {
		t.Fatal("err = nil, want the timeout")
	}
}

// One line of 100 MB without a newline: logged once, cut, and counted.
func TestExecReviewHugeLineWithoutNewline(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	h := mustExec(t, sh(`head -c 100000000 /dev/zero | tr '\0' a`), handler.ExecOptions{Log: zap.New(core)})
	if err := runAsync(t, context.Background(), h)(); err != nil {
		t.Fatal(err)
	}
	es := logs.FilterMessage(execOutput).All()
	if len(es) != 1 {
		t.Fatalf("%d lines logged, want 1", len(es))
	}
	f := es[0].ContextMap()
	if l := f["line"].(string); len(l) != handler.MaxLogLine || strings.Trim(l, "a") != "" {
		t.Errorf("line of %d bytes, want %d a's", len(l), handler.MaxLogLine)
	}
	if got, want := fmt.Sprint(f["truncated_bytes"]), fmt.Sprint(100000000-handler.MaxLogLine); got != want {
		t.Errorf("truncated_bytes %s, want %s", got, want)
	}
}

// Binary output (NULs, invalid UTF-8, no newlines for long stretches).
func TestExecReviewBinaryOutput(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	h := mustExec(t, sh(`head -c 4000000 /dev/urandom; head -c 4000000 /dev/urandom >&2; echo; echo tail`), handler.ExecOptions{Log: zap.New(core)})
	if err := runAsync(t, context.Background(), h)(); err != nil {
		t.Fatal(err)
	}
	if lines := outputLines(logs, "stdout"); len(lines) == 0 || lines[len(lines)-1] != "tail" {
		t.Errorf("the last stdout line is not \"tail\" (%d lines)", len(lines))
	}
}

// A command that closes its standard output early and runs on: the
// handler waits for it, and logs what it writes to stderr later.
func TestExecReviewClosesStdoutEarly(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	h := mustExec(t, sh(`echo first; exec >&-; sleep 1; echo later >&2`), handler.ExecOptions{Log: zap.New(core)})
	if err := runAsync(t, context.Background(), h)(); err != nil {
		t.Fatal(err)
	}
	if lines := outputLines(logs, "stdout"); !slices.Equal(lines, []string{"first"}) {
		t.Errorf("stdout %q", lines)
	}
	if lines := outputLines(logs, "stderr"); !slices.Equal(lines, []string{"later"}) {
		t.Errorf("stderr %q", lines)
	}
}

// Many lines, in parallel, none lost or logged twice, with a wait delay of
// a nanosecond and outputs larger than a pipe holds.
func TestExecReviewNoLineLostOrDoubled(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	h, err := handler.ExecWaitDelay(sh(`i=0; while [ $i -lt 3000 ]; do echo "$ADAPTQ_MESSAGE_ID-$i"; i=$((i+1)); done`),
		handler.ExecOptions{Log: zap.New(core)}, time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 8)
	for i := range 8 {
		go func() { done <- h(context.Background(), &queue.Message{ID: fmt.Sprint(i)}) }()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]int{}
	for _, l := range outputLines(logs, "stdout") {
		seen[l]++
	}
	for i := range 8 {
		for j := range 3000 {
			if n := seen[fmt.Sprintf("%d-%d", i, j)]; n != 1 {
				t.Fatalf("line %d-%d logged %d times", i, j, n)
			}
		}
	}
}
