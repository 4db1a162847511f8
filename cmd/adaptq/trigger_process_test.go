//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/adaptq/adaptq/admin"

	"github.com/adaptq/adaptq/internal/testutil"
)

// TestTriggerAcrossProcesses runs `adaptq run` and `adaptq enqueue` as two
// real processes. The worker's idle sleep is pinned at ten minutes, so the
// message it handles within seconds can only have been picked up because
// enqueue pulled the queue's push trigger.
func TestTriggerAcrossProcesses(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build adaptq with")
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "adaptq")
	build := exec.Command(goTool, "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin := ln.Addr().String()
	ln.Close()
	out := filepath.Join(tmp, "handled.txt")
	cfg := filepath.Join(tmp, "adaptq.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
log: {level: debug}
admin: {address: %q}
queues:
  - url: sqlite://%s/trigger.db?queue=jobs
    handler: "exec: sh -c 'cat >> %s'"
    idle: {min: 10m, max: 10m}
    trigger: {enabled: true, safety_interval: 10m}
`, admin, tmp, out)), 0o644); err != nil {
		t.Fatal(err)
	}

	logFile, err := os.Create(filepath.Join(tmp, "worker.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	logs := logText(logFile.Name())
	worker := exec.Command(bin, "run", "--config", cfg)
	worker.Stdout, worker.Stderr = logFile, logFile
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- worker.Wait() }()
	done := false // set once exited has been received from
	defer func() {
		if !done {
			_ = worker.Process.Kill()
			<-exited
		}
	}()

	// Wait until the worker's one task sleeps its ten minutes.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if s, ok := fetchStats(admin); ok && len(s.Queues) == 1 && s.Queues[0].IdleTasks == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker never went idle\n%s", logs)
		}
		time.Sleep(20 * time.Millisecond)
	}

	enq := exec.Command(bin, "enqueue", "--config", cfg, "--queue", "jobs", "wake up")
	summary, err := enq.CombinedOutput()
	if err != nil {
		t.Fatalf("enqueue: %v\n%s", err, summary)
	}
	if !strings.Contains(string(summary), "worker triggered") {
		t.Errorf("enqueue's summary %q does not say it triggered the worker", summary)
	}
	sent := time.Now()
	for {
		data, _ := os.ReadFile(out)
		if string(data) == "wake up" {
			break
		}
		if time.Since(sent) > testutil.HangGuard {
			t.Fatalf("the sleeping worker did not pick the message up within %s of the trigger (its sleep is 10 m)\n%s", testutil.HangGuard, logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("picked up %s after enqueue returned", time.Since(sent).Round(time.Millisecond))
	if err := worker.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		done = true
		if err != nil {
			t.Fatalf("worker exit: %v\n%s", err, logs)
		}
	case <-time.After(testutil.HangGuard):
		t.Fatalf("the worker did not exit after SIGTERM\n%s", logs)
	}
}

// logText reads a log file when printed.
type logText string

func (l logText) String() string { b, _ := os.ReadFile(string(l)); return string(b) }

func fetchStats(addr string) (admin.Stats, bool) {
	var s admin.Stats
	resp, err := http.Get("http://" + addr + admin.StatsPath)
	if err != nil {
		return s, false
	}
	defer resp.Body.Close()
	return s, json.NewDecoder(resp.Body).Decode(&s) == nil
}
