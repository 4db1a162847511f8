package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
)

// TestPoisonListShowsTheStderr: the REASON of an exec handler's failure
// shows what the program said on stderr (its last lines), not only the
// command and its exit status: the column was cut at `exit status 65; stderr: "Tra…`.
func TestPoisonListShowsTheStderr(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	// What the listener records: the handler's error, as it ends a run.
	run, err := handler.Exec([]string{sh, "-c", `printf 'Traceback (most recent call last):\n  File "process.py", line 10, in <module>\nValueError: order 1001 has no customer id\n' >&2; exit 65`}, handler.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cause := run(context.Background(), &queue.Message{ID: "orig-1", Body: []byte("{}"), DequeueCount: 1})
	if !handler.IsPermanent(cause) {
		t.Fatalf("exit 65 is not permanent: %v", cause)
	}
	dir := t.TempDir()
	cfg := writeConfig(t, dir, baseConfig)
	mustCLI(t, "", "enqueue", "-c", cfg, "-q", "orders", "seed") // creates the file
	ctx, pq := openTest(t, "sqlite://"+dir+"/q.db?queue=orders"+adaptq.PoisonSuffix)
	at := time.Date(2026, 11, 22, 20, 0, 0, 0, time.UTC)
	b, err := poison.Encode(poison.Message{ID: "orig-1", Queue: "orders", DequeueCount: 1, Rule: poison.RulePermanent,
		Reason: cause.Error(), FailedAt: at, InsertedAt: at, Body: []byte("{}")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pq.Put(ctx, b, queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	r := mustCLI(t, "", "poison", "list", "-c", cfg, "-q", "orders")
	var row string
	for _, line := range strings.Split(r.stdout, "\n") {
		if strings.Contains(line, "orig-1") {
			row = line
		}
	}
	for _, want := range []string{"permanent", "exit status 65", "ValueError: order 1001 has no customer id"} {
		if !strings.Contains(row, want) {
			t.Errorf("the row does not say %q:\n%s", want, r.stdout)
		}
	}
	// show keeps the whole reason.
	r = mustCLI(t, "", "poison", "show", "-c", cfg, "-q", "orders", "orig-1")
	if !strings.Contains(r.stdout, "Traceback") || !strings.Contains(r.stdout, sh) {
		t.Errorf("show lost part of the reason:\n%s", r.stdout)
	}
}

// TestReasonSummary: the REASON column's summary of a failure's reason,
// for the shapes the handlers write.
func TestReasonSummary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rule, reason, want string
	}{
		{"permanent", `handler: exec "/opt/app/bin/process-order": exit status 65; stderr: "bad order\nValueError: no customer id"`,
			"permanent: exit status 65: bad order / ValueError: no customer id"},
		// Only the last lines fit.
		{"max_dequeue_count", `handler: exec "x": exit status 1; stderr: "` + strings.Repeat("noise ", 20) + `\nlast words"`,
			"max_dequeue_count: exit status 1: … / last words"},
		// A reason cut in the envelope (MaxReason) in the middle of an escape.
		{"permanent", `handler: exec "x": exit status 2; stderr: "first\nsecond \u00e9\` + "…",
			"permanent: exit status 2: first / second é…"},
		{"max_dequeue_count", `handler: exec "x": killed: context deadline exceeded`, "max_dequeue_count: killed: context deadline exceeded"},
		{"max_dequeue_count", "exit status 3 (try 7)", "max_dequeue_count: exit status 3 (try 7)"},
		{"permanent", `handler: http POST http://127.0.0.1:1/x: 422 Unprocessable Entity`, "permanent: handler: http POST http://127.0.0.1:1/x: 422 Unprocessable Entity"},
	} {
		if got := reasonSummary(tc.rule, tc.reason, 80); got != tc.want {
			t.Errorf("reasonSummary(%q, %q)\n got %q\nwant %q", tc.rule, tc.reason, got, tc.want)
		}
	}
}
