package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/testutil"
)

// startRun runs "adaptq run" in-process with signals from sigs; the
// returned channel yields the exit code.
func startRun(ctx context.Context, t *testing.T, sigs chan os.Signal, args ...string) (<-chan int, *testutil.SyncBuffer, *testutil.SyncBuffer) {
	t.Helper()
	var out, errOut testutil.SyncBuffer
	e := env{
		stdin: strings.NewReader(""), stdout: &out, stderr: &errOut,
		signals: func() (<-chan os.Signal, func()) { return sigs, func() {} },
	}
	code := make(chan int, 1)
	go func() { code <- runContext(ctx, e, append([]string{"run"}, args...)) }()
	return code, &out, &errOut
}

func exitCodeWithin(t *testing.T, code <-chan int, stderr *testutil.SyncBuffer) int {
	t.Helper()
	select {
	case c := <-code:
		return c
	case <-time.After(testutil.HangGuard):
		t.Fatalf("run did not return\nstderr: %s", stderr.String())
		return -1
	}
}

func TestRunRefusesAGoHandler(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("exec: sh")
	}
	dir := t.TempDir()
	cfg := writeConfig(t, dir, `
log: {level: error}
admin: {address: ""}
queues:
  - url: sqlite://$DIR/q.db?queue=billing
    handler: "exec: cat"
  - url: sqlite://$DIR/q.db?queue=orders
`)
	code, out, errOut := startRun(context.Background(), t, nil, "--config", cfg)
	if c := exitCodeWithin(t, code, errOut); c != exitUsage {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", c, exitUsage, out, errOut)
	}
	for _, want := range []string{"adaptq: start-up failed: no handler registered: queues[1].handler: no handler key", "hint:", "so queues[1].handler must", "exec:", "http:"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut.String(), "queues[0].handler") {
		t.Errorf("the hint names the exec: queue:\n%s", errOut)
	}
}

func TestRunStartupErrorExitsTwo(t *testing.T) {
	t.Parallel()
	// The admin address is taken: the worker cannot start.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := writeConfig(t, t.TempDir(), `
log: {level: error}
admin: {address: "`+ln.Addr().String()+`"}
queues:
  - url: sqlite://$DIR/q.db?queue=orders
    handler: "exec: cat"
`)
	code, _, errOut := startRun(context.Background(), t, nil, "-c", cfg)
	if c := exitCodeWithin(t, code, errOut); c != exitUsage || !strings.Contains(errOut.String(), "admin.address") {
		t.Fatalf("exit %d, stderr %s", c, errOut)
	}
}

// runProcesses enqueues messages with the CLI, runs the worker until every
// one was handled, stops it with stop, and checks the exit code and that
// each message was handled once and deleted.
func runProcesses(t *testing.T, stop func(sigs chan os.Signal, cancel context.CancelFunc)) {
	if runtime.GOOS == "windows" {
		t.Skip("exec: sh")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "handled.txt")
	cfg := writeConfig(t, dir, `
log: {level: error}
admin: {address: "127.0.0.1:0"}
queues:
  - url: sqlite://$DIR/q.db?queue=orders
    handler: "exec: sh -c 'printf \"%s %s\\n\" \"$ADAPTQ_MESSAGE_ID\" \"$(cat)\" >> `+out+`'"
    idle: {max: 200ms}
`)
	var want []string
	for i := range 10 {
		want = append(want, fmt.Sprintf("job-%d", i))
	}
	mustCLI(t, strings.Join(want, "\n"), "enqueue", "-c", cfg, "--lines", "-")

	sigs := make(chan os.Signal, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code, stdout, stderr := startRun(ctx, t, sigs, "-c", cfg)
	lines := func() []string {
		data, _ := os.ReadFile(out)
		return strings.Split(strings.TrimSpace(string(data)), "\n")
	}
	waitUntil(t, "the worker handled 10 messages", func() bool { return len(lines()) >= 10 })
	stop(sigs, cancel)
	if c := exitCodeWithin(t, code, stderr); c != exitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", c, stdout, stderr)
	}
	var got []string
	ids := map[string]bool{}
	for _, l := range lines() {
		id, body, _ := strings.Cut(l, " ")
		if ids[id] {
			t.Errorf("message %s handled twice", id)
		}
		ids[id] = true
		got = append(got, body)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("handled %q, want %q", got, want)
	}
	if n := queueDepthOf(t, "sqlite://"+dir+"/q.db?queue=orders"); n != 0 {
		t.Errorf("%d messages left after the drain", n)
	}
}

func TestRunProcessesAndDrainsOnSIGTERM(t *testing.T) {
	t.Parallel()
	runProcesses(t, func(sigs chan os.Signal, _ context.CancelFunc) { sigs <- syscall.SIGTERM })
}

func TestRunProcessesAndDrainsOnCancel(t *testing.T) {
	t.Parallel()
	runProcesses(t, func(_ chan os.Signal, cancel context.CancelFunc) { cancel() })
}
