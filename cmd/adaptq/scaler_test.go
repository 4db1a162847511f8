package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/internal/testutil"
)

// `adaptq scaler` serves the signal of a config whose handlers the binary
// could not run (a Go handler): 0 for the empty queue, N for a backlog;
// SIGTERM stops it with exit 0.
func TestScalerCommandServesTheSignalWithoutHandlers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addr := freeAddress(t)
	cfg := writeConfig(t, dir, `
log: {level: error}
admin: {address: "`+addr+`"}
queues:
  - url: sqlite://$DIR/q.db?queue=orders
    instances: {messages_per_instance: 10}
  - url: sqlite://$DIR/q.db?queue=empty
`)
	mustCLI(t, "x", "enqueue", "-c", cfg, "--queue", "orders", "--count", "25", "-")
	mustCLI(t, "x", "enqueue", "-c", cfg, "--queue", "empty", "-")
	mustCLI(t, "", "purge", "-c", cfg, "--queue", "empty", "--yes")

	var out, errOut testutil.SyncBuffer
	sigs := make(chan os.Signal, 1)
	e := env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, signals: func() (<-chan os.Signal, func()) { return sigs, func() {} }}
	code := make(chan int, 1)
	go func() { code <- runContext(context.Background(), e, []string{"scaler", "-c", cfg}) }()

	var sig admin.Scaling
	waitUntil(t, "the scaler answers", func() bool {
		select {
		case c := <-code:
			t.Fatalf("scaler exited %d: %s", c, errOut.String())
		default:
		}
		resp, err := http.Get("http://" + addr + admin.ScalingPath)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&sig) == nil
	})
	if sig.DesiredInstances != 3 || len(sig.Queues) != 2 || sig.Queues[0].Depth != 25 || sig.Queues[0].DesiredInstances != 3 || sig.Queues[1].DesiredInstances != 0 {
		t.Errorf("signal %+v: want 3 instances for 25 waiting at 10 each, 0 for the empty queue", sig)
	}
	sigs <- syscall.SIGTERM
	if c := exitCodeWithin(t, code, &errOut); c != exitOK {
		t.Fatalf("exit %d after SIGTERM\nstderr: %s", c, errOut.String())
	}
}

// A memory:// queue is refused: the scaler's would be a new, empty queue
// of its own, answering 0 under any backlog.
func TestScalerCommandRefusesAnInProcessQueue(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, t.TempDir(), `
admin: {address: "127.0.0.1:0"}
queues:
  - url: memory://orders
`)
	r := cli(t, "", "scaler", "-c", cfg)
	if r.code != exitUsage || !strings.Contains(r.stderr, "queues[0].url memory://orders: a memory:// queue lives inside one process") {
		t.Errorf("exit %d, stderr %q: want 2 naming queues[0].url", r.code, r.stderr)
	}
}

// A sqlite:// queue whose file does not exist is refused, and no file is
// created: the scaler runs where the workers' volume may not be mounted
// (its own Deployment), and an empty file of its own would answer 0 under
// any backlog, scaling the workers to zero for good.
func TestScalerCommandRefusesAMissingSQLiteFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, `
admin: {address: "127.0.0.1:0"}
queues:
  - url: sqlite://$DIR/q.db?queue=orders
`)
	// A guard, not a timing: a scaler that serves runs until ctx ends.
	ctx, cancel := context.WithTimeout(context.Background(), testutil.HangGuard)
	defer cancel()
	var out, errOut testutil.SyncBuffer
	e := env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, signals: func() (<-chan os.Signal, func()) { return nil, func() {} }}
	code := runContext(ctx, e, []string{"scaler", "-c", cfg})
	if code != exitUsage || !strings.Contains(errOut.String(), "queues[0].url") || !strings.Contains(errOut.String(), "no such file") {
		t.Errorf("exit %d, stderr %q: want 2 naming queues[0].url and the missing file", code, errOut.String())
	}
	if _, err := os.Stat(dir + "/q.db"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the scaler created the workers' database file (%v)", err)
	}
}
