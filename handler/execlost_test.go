//go:build unix

package handler_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sync/errgroup"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
)

// Issue 27, item 3: under load some exec output lines were never logged.
// The command had exited and its lines sat in the pipe, but the goroutine
// that copies them was late: once the wait delay after the exit passed,
// os/exec closed the pipe, and what it still held was lost. Here the
// delay is a nanosecond, as if every copying goroutine were late; every
// line a command wrote before it exited must still be logged.
func TestExecLogsEveryLineOfManyMessages(t *testing.T) {
	t.Parallel()
	const messages, parallel = 300, 16
	core, logs := observer.New(zapcore.InfoLevel)
	h, err := handler.ExecWaitDelay(sh(`echo "line-$ADAPTQ_MESSAGE_ID"; echo "err-$ADAPTQ_MESSAGE_ID" >&2`),
		handler.ExecOptions{Log: zap.New(core)}, time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	var g errgroup.Group
	g.SetLimit(parallel)
	for i := range messages {
		g.Go(func() error { return h(context.Background(), &queue.Message{ID: fmt.Sprint(i), DequeueCount: 1}) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, stream := range []string{"stdout", "stderr"} {
		got := map[string]bool{}
		for _, l := range outputLines(logs, stream) {
			got[l] = true
		}
		prefix := map[string]string{"stdout": "line-", "stderr": "err-"}[stream]
		var missing []string
		for i := range messages {
			if l := fmt.Sprintf("%s%d", prefix, i); !got[l] {
				missing = append(missing, l)
			}
		}
		if len(missing) > 0 {
			t.Errorf("%s: %d of %d lines logged; missing %d, the first %q", stream, len(got), messages, len(missing), missing[0])
		}
	}
}

// A background process that writes without end must not hold the handler
// once the command has exited: what the pipe holds is read, then no more.
func TestExecBackgroundWriterDoesNotHoldTheHandler(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	core, logs := observer.New(zapcore.InfoLevel)
	limit, err := handler.NewLogLimit(100, time.Hour, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := handler.ExecWaitDelay(sh(`echo started; (while :; do echo spam; done) & echo $! > "$PIDFILE"`),
		handler.ExecOptions{Env: []string{"PIDFILE=" + pidFile}, Log: zap.New(core), LogLimit: limit}, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := runAsync(t, context.Background(), h)(); err != nil {
		t.Fatalf("err = %v, want nil", err)
	}
	readPid(t, pidFile) // killed at cleanup
	if lines := outputLines(logs, "stdout"); !slices.Contains(lines, "started") {
		t.Errorf("the command's own line is not logged among %d", len(lines))
	}
}

// log.exec_output: lines past the limit are counted, not logged, and one
// line at the window's end says how many.
func TestExecOutputLogLimit(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.InfoLevel)
	clk := clock.NewFake(time.Time{})
	limit, err := handler.NewLogLimit(3, 10*time.Second, zap.New(core).With(zap.String("queue", "orders")), clk)
	if err != nil {
		t.Fatal(err)
	}
	h := mustExec(t, sh(`for i in 1 2; do echo "out-$i-$ADAPTQ_MESSAGE_ID"; echo "err-$i-$ADAPTQ_MESSAGE_ID" >&2; done`),
		handler.ExecOptions{Log: zap.New(core), LogLimit: limit})
	for _, id := range []string{"a", "b"} {
		if err := h(context.Background(), &queue.Message{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if n := logs.FilterMessage(execOutput).Len(); n != 3 {
		t.Errorf("%d lines logged in the first window, want 3", n)
	}
	if got := limit.NotLogged(); got != 5 {
		t.Errorf("NotLogged() = %d, want 5", got)
	}
	const summary = "handler: exec output over the log's rate limit; these lines were not logged"
	if n := logs.FilterMessage(summary).Len(); n != 0 {
		t.Fatalf("a summary before the window's end")
	}

	// The window ends: one line sums up the five lines left out.
	clk.Advance(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for logs.FilterMessage(summary).Len() == 0 && ctx.Err() == nil {
		runtime.Gosched()
	}
	s := logs.FilterMessage(summary).All()
	if len(s) != 1 {
		t.Fatalf("%d summaries, want 1", len(s))
	}
	f := s[0].ContextMap()
	if s[0].Level != zapcore.WarnLevel || f["not_logged"] != int64(5) || f["queue"] != "orders" || f["limit"] != "3 lines per 10s" {
		t.Errorf("summary %s %v, want warn with not_logged 5, queue orders, limit 3 lines per 10s", s[0].Level, f)
	}

	// A new window logs again; Flush sums up at once what it left out.
	if err := h(context.Background(), &queue.Message{ID: "c"}); err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessage(execOutput).Len(); n != 6 {
		t.Errorf("%d lines logged after the second window, want 6", n)
	}
	limit.Flush()
	if s := logs.FilterMessage(summary).All(); len(s) != 2 || s[1].ContextMap()["not_logged"] != int64(1) {
		t.Errorf("after Flush: summaries %v, want a second with not_logged 1", s)
	}
}
