//go:build unix

package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/adaptq/adaptq/queue"
)

func TestRunSecondSignalExitsAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	// A memory:// queue: the drain the test leaves behind writes no file
	// in dir.
	cfg := writeConfig(t, dir, `
log: {level: error}
admin: {address: ""}
queues:
  - url: memory://second-signal
    handler: "exec: sh -c 'echo $$ > `+pidFile+`.tmp; mv `+pidFile+`.tmp `+pidFile+`; exec sleep 60'"
    shutdown_grace: 1m
`)
	// Put in this process: enqueue refuses a memory:// queue, which would
	// be its own.
	mq, err := queue.Open(context.Background(), "memory://second-signal")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mq.Put(context.Background(), []byte("slow"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	defer mq.Close()
	sigs := make(chan os.Signal, 2)
	code, _, stderr := startRun(context.Background(), t, sigs, "-c", cfg)
	var pid int
	waitUntil(t, "the handler started", func() bool {
		data, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	})
	sigs <- os.Interrupt
	sigs <- os.Interrupt
	if c := exitCodeWithin(t, code, stderr); c != exitSignal {
		t.Fatalf("exit %d, want %d\nstderr: %s", c, exitSignal, stderr)
	}
	// The handler's command did not outlive the worker: it was killed and
	// reaped before run returned.
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("the handler's command (pid %d) still runs after the second signal: kill -0: %v", pid, err)
	}
}
