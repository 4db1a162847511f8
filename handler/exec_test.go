//go:build unix

package handler_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/adaptq/adaptq/internal/testutil"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
)

// mustExec builds an Exec handler or fails the test.
func mustExec(t *testing.T, argv []string, o handler.ExecOptions) handler.Func {
	t.Helper()
	h, err := handler.Exec(argv, o)
	if err != nil {
		t.Fatalf("Exec(%q): %v", argv, err)
	}
	return h
}

// sh returns argv that runs script with sh -c.
func sh(script string) []string { return []string{"sh", "-c", script} }

// writeScript writes an executable script to dir and returns its path.
func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExecStdinByteForByte(t *testing.T) {
	t.Parallel()
	big := make([]byte, 1<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	tests := []struct {
		name string
		body []byte
	}{
		{"empty", nil},
		{"text", []byte("hello, wörld\n")},
		{"no trailing newline", []byte("a\nb")},
		{"every byte value", all},
		{"NULs", []byte("\x00\x00a\x00")},
		{"1 MiB random", big},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Once through a file (stdin exactly), once through Stdout.
			out := filepath.Join(t.TempDir(), "body")
			h := mustExec(t, sh(`cat > "$OUT"`), handler.ExecOptions{Env: []string{"OUT=" + out}})
			if err := h(context.Background(), &queue.Message{ID: "m", Body: tt.body}); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.body) {
				t.Errorf("stdin: got %d bytes, want %d (equal prefix %d)", len(got), len(tt.body), commonPrefix(got, tt.body))
			}

			var stdout bytes.Buffer
			h = mustExec(t, []string{"cat"}, handler.ExecOptions{Stdout: &stdout})
			if err := h(context.Background(), &queue.Message{ID: "m", Body: tt.body}); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(stdout.Bytes(), tt.body) {
				t.Errorf("stdout: got %d bytes, want %d (equal prefix %d)", stdout.Len(), len(tt.body), commonPrefix(stdout.Bytes(), tt.body))
			}
		})
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestExecCommandIgnoresStdin(t *testing.T) {
	t.Parallel()
	// A command that exits without reading a body larger than a pipe
	// buffer must not fail or hang the handler.
	h := mustExec(t, []string{"true"}, handler.ExecOptions{})
	if err := h(context.Background(), &queue.Message{ID: "m", Body: make([]byte, 1<<20)}); err != nil {
		t.Fatal(err)
	}
}

func TestExecEnv(t *testing.T) {
	t.Parallel()
	script := `printf '%s|%s|%s|%s|%s|%s' "$ADAPTQ_MESSAGE_ID" "$ADAPTQ_DEQUEUE_COUNT" "$ADAPTQ_INSERTED_AT" "${ADAPTQ_QUEUE-unset}" "$EXTRA" "$PATH"`
	ins := time.Date(2024, 3, 5, 14, 7, 9, 123456789, time.FixedZone("CET", 3600))
	m := &queue.Message{ID: "msg-7", DequeueCount: 3, InsertedAt: ins, Body: []byte("x")}
	path := os.Getenv("PATH")
	tests := []struct {
		name string
		o    handler.ExecOptions
		m    *queue.Message
		want string
	}{
		{"with queue", handler.ExecOptions{Queue: "orders", Env: []string{"EXTRA=a=b c"}}, m,
			"msg-7|3|2024-03-05T13:07:09Z|orders|a=b c|" + path},
		{"without queue", handler.ExecOptions{}, m,
			"msg-7|3|2024-03-05T13:07:09Z|unset||" + path},
		{"message variables win over Env", handler.ExecOptions{Queue: "q", Env: []string{
			"ADAPTQ_MESSAGE_ID=forged", "ADAPTQ_DEQUEUE_COUNT=99", "ADAPTQ_QUEUE=other", "EXTRA=1", "EXTRA=2"}}, m,
			"msg-7|3|2024-03-05T13:07:09Z|q|2|" + path},
		{"no insertion time", handler.ExecOptions{}, &queue.Message{ID: "m", DequeueCount: 1},
			"m|1||unset||" + path},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			tt.o.Stdout = &out
			h := mustExec(t, sh(script), tt.o)
			if err := h(context.Background(), tt.m); err != nil {
				t.Fatal(err)
			}
			if got := out.String(); got != tt.want {
				t.Errorf("env = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestExecExitCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		script    string
		perm      []int
		wantCode  int // 0: success
		permanent bool
		wantText  string
	}{
		{name: "exit 0", script: "exit 0"},
		{name: "exit 1", script: "exit 1", wantCode: 1, wantText: "exit status 1"},
		{name: "exit 75 (EX_TEMPFAIL)", script: "exit 75", wantCode: 75, wantText: "exit status 75"},
		{name: "exit 65 is permanent by default", script: "exit 65", wantCode: 65, permanent: true, wantText: "exit status 65"},
		{name: "no permanent codes", script: "exit 65", perm: []int{}, wantCode: 65},
		{name: "own permanent codes", script: "exit 3", perm: []int{3, 4}, wantCode: 3, permanent: true},
		{name: "own permanent codes replace 65", script: "exit 65", perm: []int{3}, wantCode: 65},
		{name: "killed by a signal", script: "kill -KILL $$", wantCode: -1, wantText: "signal: killed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := mustExec(t, sh(tt.script), handler.ExecOptions{PermanentExitCodes: tt.perm})
			err := h(context.Background(), &queue.Message{ID: "m", Body: []byte("x")})
			if tt.wantCode == 0 {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			xe, ok := errors.AsType[*handler.ExitError](err)
			if !ok {
				t.Fatalf("err = %#v, want an *ExitError", err)
			}
			if xe.Code != tt.wantCode || xe.Command != "sh" {
				t.Errorf("ExitError{Command: %q, Code: %d}, want {sh, %d}", xe.Command, xe.Code, tt.wantCode)
			}
			if got := handler.IsPermanent(err); got != tt.permanent {
				t.Errorf("IsPermanent(%v) = %v, want %v", err, got, tt.permanent)
			}
			if _, ok := errors.AsType[*exec.ExitError](err); !ok {
				t.Errorf("errors.As does not reach the *exec.ExitError")
			}
			if !strings.HasPrefix(err.Error(), `handler: exec "sh": `) || !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("Error() = %q, want it to name sh and say %q", err, tt.wantText)
			}
		})
	}
}

func TestExecErrorText(t *testing.T) {
	t.Parallel()
	// The error names argv[0] and the stderr tail, never the arguments
	// (they may hold secrets) nor the body.
	h := mustExec(t, []string{"sh", "-c", `cat >/dev/null; echo "bad record" >&2; exit 65`, "--token=hunter2"}, handler.ExecOptions{})
	err := h(context.Background(), &queue.Message{ID: "m", Body: []byte("BODY-SECRET")})
	if got, want := err.Error(), `handler: exec "sh": exit status 65; stderr: "bad record"`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestExecStderrTailBounded(t *testing.T) {
	t.Parallel()
	// 10 KiB of noise, then the cause of the failure. The output is 10012
	// bytes, so the last 4096 start with the second byte of an "é": the
	// tail drops it and keeps 4095.
	script := `i=0; while [ $i -lt 2000 ]; do printf 'é-x-' >&2; i=$((i+1)); done; echo 'the cause!!' >&2; exit 2`
	h := mustExec(t, sh(script), handler.ExecOptions{})
	err := h(context.Background(), &queue.Message{ID: "m", Body: []byte("BODY-SECRET")})
	xe, ok := errors.AsType[*handler.ExitError](err)
	if !ok {
		t.Fatalf("err = %v, want an *ExitError", err)
	}
	if n := len(xe.Stderr); n != handler.MaxStderrTail-1 {
		t.Errorf("len(Stderr) = %d, want the last %d bytes less a split character", n, handler.MaxStderrTail)
	}
	if !bytes.HasSuffix(xe.Stderr, []byte("the cause!!\n")) {
		t.Errorf("Stderr does not end with the cause: %q", xe.Stderr[max(0, len(xe.Stderr)-40):])
	}
	if !utf8.Valid(xe.Stderr) {
		t.Errorf("Stderr starts inside a character: %q", xe.Stderr[:8])
	}
	if !strings.Contains(err.Error(), `the cause!!"`) {
		t.Errorf("Error() does not end with the cause: …%s", err.Error()[len(err.Error())-40:])
	}
	if n := len(err.Error()); n > 2*handler.MaxStderrTail+100 {
		t.Errorf("len(Error()) = %d, not bounded", n)
	}
	if strings.Contains(err.Error(), "BODY-SECRET") {
		t.Error("the error contains the body")
	}
}

func TestExecStdoutAndStderrWriters(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	h := mustExec(t, sh(`echo out1; echo err1 >&2; printf out2; exit 1`),
		handler.ExecOptions{Stdout: &stdout, Stderr: &stderr})
	err := h(context.Background(), &queue.Message{ID: "m"})
	if err == nil {
		t.Fatal("err = nil, want exit status 1")
	}
	if got := stdout.String(); got != "out1\nout2" {
		t.Errorf("stdout = %q", got)
	}
	if got := stderr.String(); got != "err1\n" {
		t.Errorf("stderr = %q", got)
	}
	if !strings.Contains(err.Error(), "err1") {
		t.Errorf("Error() = %q lacks the stderr tail", err)
	}
}

func TestExecStdoutWholeLinesUnderConcurrency(t *testing.T) {
	t.Parallel()
	// bytes.Buffer is not safe for concurrent use: the race detector
	// checks that Exec serialises the writes.
	var out bytes.Buffer
	const handlers, lines = 8, 200
	h := mustExec(t, sh(`i=0; while [ $i -lt 200 ]; do echo "$ADAPTQ_MESSAGE_ID line $i"; i=$((i+1)); done`),
		handler.ExecOptions{Stdout: &out})
	var wg sync.WaitGroup
	for i := range handlers {
		wg.Go(func() {
			if err := h(context.Background(), &queue.Message{ID: fmt.Sprintf("msg-%d", i)}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(got) != handlers*lines {
		t.Fatalf("%d lines, want %d", len(got), handlers*lines)
	}
	next := map[string]int{}
	for _, l := range got {
		var id string
		var n int
		if _, err := fmt.Sscanf(l, "%s line %d", &id, &n); err != nil || next[id] != n {
			t.Fatalf("line %q is torn or out of order (want line %d of %s)", l, next[id], id)
		}
		next[id]++
	}
}

func TestExecDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeScript(t, dir, "run.sh", `pwd`)
	var out bytes.Buffer
	// A relative command path is found in Dir, and runs there.
	h := mustExec(t, []string{"./run.sh"}, handler.ExecOptions{Dir: dir, Stdout: &out})
	if err := h(context.Background(), &queue.Message{ID: "m"}); err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.EvalSymlinks(dir)
	got, _ := filepath.EvalSymlinks(strings.TrimSpace(out.String()))
	if got != want {
		t.Errorf("ran in %q, want %q", got, want)
	}
}

func TestExecConstructionErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		argv  []string
		o     handler.ExecOptions
		want  string
		is    error
		never string // must not appear in the error
	}{
		{name: "no argv", argv: nil, want: "empty command"},
		{name: "empty name", argv: []string{""}, want: "empty command"},
		{name: "missing executable", argv: []string{"adaptq-no-such-program", "x"},
			want: `"adaptq-no-such-program"`, is: exec.ErrNotFound},
		{name: "missing script", argv: []string{"./nope.sh"}, o: handler.ExecOptions{Dir: dir}, want: `"./nope.sh"`},
		{name: "not executable", argv: []string{file}, want: strconv.Quote(file)},
		{name: "negative timeout", argv: []string{"true"}, o: handler.ExecOptions{Timeout: -time.Second}, want: "negative timeout"},
		{name: "env without =", argv: []string{"true"}, o: handler.ExecOptions{Env: []string{"A=1", "NOVALUE"}}, want: `"NOVALUE"`},
		{name: "env without name", argv: []string{"true"}, o: handler.ExecOptions{Env: []string{"=hunter2"}},
			want: "empty name", never: "hunter2"},
		{name: "missing dir", argv: []string{"true"}, o: handler.ExecOptions{Dir: filepath.Join(dir, "nope")},
			want: "working directory", is: os.ErrNotExist},
		{name: "dir is a file", argv: []string{"true"}, o: handler.ExecOptions{Dir: file}, want: "not a directory"},
		{name: "permanent code 0", argv: []string{"true"}, o: handler.ExecOptions{PermanentExitCodes: []int{65, 0}},
			want: "permanent exit code 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, err := handler.Exec(tt.argv, tt.o)
			if err == nil {
				t.Fatalf("Exec(%q) = %v, nil; want an error", tt.argv, h)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.is)
			}
			if tt.never != "" && strings.Contains(err.Error(), tt.never) {
				t.Errorf("error %q contains %q", err, tt.never)
			}
		})
	}
}

// childScript writes a script that starts `sleep 60` in the background,
// records its pid in the file pidFile (with the shell's builtin echo, so
// nothing else is forked) and waits for it.
func childScript(t *testing.T) (script, pidFile string) {
	t.Helper()
	dir := t.TempDir()
	pidFile = filepath.Join(dir, "child.pid")
	script = writeScript(t, dir, "spawn.sh", "sleep 60 &\necho $! > \""+pidFile+"\"\nwait\n")
	return script, pidFile
}

// tryReadPid returns the pid in pidFile once the file holds a whole line,
// and kills that process when the test ends in case Exec failed to.
func tryReadPid(t *testing.T, pidFile string) (int, bool) {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %q: %v", b, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid, true
}

// readPid waits up to 10 s for pidFile and returns the pid in it.
func readPid(t *testing.T, pidFile string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if pid, ok := tryReadPid(t, pidFile); ok {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatal("the script wrote no pid file within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// assertGone fails the test unless process pid ends within 5 s. A zombie
// counts as gone: it has died, and a container's init may never reap it.
func assertGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		if runtime.GOOS == "linux" {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
				// pid (comm) state …; comm may contain spaces and parentheses.
				if s := string(b); strings.HasPrefix(s[strings.LastIndexByte(s, ')')+1:], " Z") {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("child process %d is still running", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runAsync runs h in a goroutine and returns a func that waits up to 10 s
// for its result.
func runAsync(t *testing.T, ctx context.Context, h handler.Func) func() error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- h(ctx, &queue.Message{ID: "m", Body: []byte("x")}) }()
	return func() error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(testutil.HangGuard):
			t.Fatalf("the handler did not return within %s: the command was not killed", testutil.HangGuard)
			return nil
		}
	}
}

func TestExecTimeout(t *testing.T) {
	t.Parallel()
	h := mustExec(t, []string{"sleep", "60"}, handler.ExecOptions{Timeout: 200 * time.Millisecond})
	err := runAsync(t, context.Background(), h)()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	if handler.IsPermanent(err) {
		t.Error("a timeout is permanent")
	}
	if !strings.Contains(err.Error(), `"sleep"`) || !strings.Contains(err.Error(), "200ms") {
		t.Errorf("Error() = %q, want it to name the command and the timeout", err)
	}
}

func TestExecTimeoutKillsChildren(t *testing.T) {
	t.Parallel()
	// On a loaded machine the script may not have started its child before
	// the timeout; then there is nothing to check, and a longer timeout is
	// tried.
	for timeout := 300 * time.Millisecond; ; timeout *= 2 {
		script, pidFile := childScript(t)
		h := mustExec(t, []string{script}, handler.ExecOptions{Timeout: timeout})
		err := runAsync(t, context.Background(), h)()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want context.DeadlineExceeded", err)
		}
		if pid, ok := tryReadPid(t, pidFile); ok {
			assertGone(t, pid)
			return
		}
		if timeout >= 5*time.Second {
			t.Fatalf("the script started no child within %s", timeout)
		}
		t.Logf("the script started no child within %s; trying a longer timeout", timeout)
	}
}

func TestExecContextCancelKillsChildren(t *testing.T) {
	t.Parallel()
	script, pidFile := childScript(t)
	h := mustExec(t, []string{script}, handler.ExecOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := runAsync(t, ctx, h)
	pid := readPid(t, pidFile)
	cancel()
	err := wait()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if handler.IsPermanent(err) {
		t.Error("a cancellation is permanent")
	}
	assertGone(t, pid)
}

func TestExecContextDoneBeforeStart(t *testing.T) {
	t.Parallel()
	h := mustExec(t, []string{"true"}, handler.ExecOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h(ctx, &queue.Message{ID: "m"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestExecBackgroundProcessDoesNotHoldTheHandler(t *testing.T) {
	t.Parallel()
	// The command exits 0 at once, but a background child keeps its
	// stdout and stderr open for a minute: the handler succeeds without
	// waiting for it.
	pidFile := filepath.Join(t.TempDir(), "pid")
	var out testutil.SyncBuffer
	h := mustExec(t, sh(`sleep 60 & echo $! > "$PIDFILE"; echo started`),
		handler.ExecOptions{Env: []string{"PIDFILE=" + pidFile}, Stdout: &out})
	if err := runAsync(t, context.Background(), h)(); err != nil {
		t.Fatalf("err = %v, want nil", err)
	}
	readPid(t, pidFile) // killed at cleanup
	if got := out.String(); got != "started\n" {
		t.Errorf("stdout = %q", got)
	}
}
