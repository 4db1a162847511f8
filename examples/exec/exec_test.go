// Package exec_test checks the exec example as its README runs it: the
// adaptq binary, the example's config and script, real processes and a
// real SIGTERM.
package exec_test

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/testutil"
)

const config = "examples/exec/adaptq.yaml"

func TestExecExample(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the example's handler is a POSIX shell script, stopped by SIGTERM")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build adaptq with")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "adaptq")
	build := exec.Command(goTool, "build", "-o", bin, "./cmd/adaptq")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// The example's config as it is, run from the repository root, with its
	// queue and ledger moved to tmp and its admin endpoint on a free port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin := ln.Addr().String()
	ln.Close()
	ledger := filepath.Join(tmp, "ledger.txt")
	env := append(os.Environ(),
		"ADAPTQ_QUEUES_0_URL=sqlite://"+tmp+"/exec-example.db?queue=payments",
		"ADAPTQ_ADMIN_ADDRESS="+admin,
		"LEDGER="+ledger,
	)
	adaptq := func(stdin string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir, cmd.Env, cmd.Stdin = root, env, strings.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("adaptq %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
		}
		return out
	}

	payments := []string{"A-1001 19.99", "A-1002 5", "B-7 0.50", "C-3 1200"}
	adaptq(strings.Join(payments[:3], "\n")+"\n", "enqueue", "--config", config, "--lines", "-")
	adaptq("", "enqueue", "--config", config, payments[3])
	adaptq("", "enqueue", "--config", config, "not a payment")

	// An earlier delivery of A-1002 recorded it but lost its delete: the
	// script must not record it again.
	var earlier string
	for _, line := range strings.Split(strings.TrimSpace(string(adaptq("", "peek", "--config", config, "--json"))), "\n") {
		var m struct{ ID, Body string }
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("peek --json: %v: %q", err, line)
		}
		if m.Body == "A-1002 5" {
			earlier = m.ID
		}
	}
	if earlier == "" {
		t.Fatal("peek does not show A-1002")
	}
	if err := os.WriteFile(ledger, []byte(earlier+"\tA-1002 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	logs, err := os.Create(filepath.Join(tmp, "worker.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	worker := exec.Command(bin, "run", "--config", config)
	worker.Dir, worker.Env, worker.Stdout, worker.Stderr = root, env, logs, logs
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- worker.Wait() }()
	waited := false // set once exited has been received from
	t.Cleanup(func() {
		if !waited {
			_ = worker.Process.Kill()
			<-exited
		}
	})
	workerLog := func() string { b, _ := os.ReadFile(logs.Name()); return string(b) }

	recorded := func() []string {
		data, _ := os.ReadFile(ledger)
		return strings.Split(strings.TrimSpace(string(data)), "\n")
	}
	waitRecorded := func(n int) {
		t.Helper()
		deadline := time.Now().Add(testutil.HangGuard)
		for len(recorded()) < n {
			select {
			case err := <-exited:
				waited = true
				t.Fatalf("the worker exited early: %v\n%s", err, workerLog())
			case <-time.After(10 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("the ledger has %d of %d payments\n%s", len(recorded()), n, workerLog())
			}
		}
	}
	waitRecorded(len(payments))

	// A payment put while the worker runs pulls its push trigger.
	late := "D-9 1"
	payments = append(payments, late)
	if out := adaptq("", "enqueue", "--config", config, late); !strings.Contains(string(out), "worker triggered") {
		t.Errorf("enqueue while the worker runs: %q, want it to trigger the worker", out)
	}
	waitRecorded(len(payments))

	if err := worker.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		waited = true
		if err != nil {
			t.Fatalf("after SIGTERM: %v (want exit 0)\n%s", err, workerLog())
		}
	case <-time.After(testutil.HangGuard):
		t.Fatalf("the worker did not exit after SIGTERM\n%s", workerLog())
	}

	// Each payment once, each message id once, the malformed body never.
	var bodies []string
	ids := map[string]bool{}
	for _, line := range recorded() {
		id, body, ok := strings.Cut(line, "\t")
		if !ok || ids[id] {
			t.Errorf("ledger line %q: malformed or a repeated id", line)
		}
		ids[id] = true
		bodies = append(bodies, body)
	}
	slices.Sort(bodies)
	if !slices.Equal(bodies, payments) {
		t.Errorf("ledger has %q, want each of %q once", bodies, payments)
	}
	if !ids[earlier] {
		t.Errorf("the earlier record of %s is gone", earlier)
	}

	// The payments were deleted; the malformed message failed permanently
	// and went to the poison queue, body intact.
	var stats struct {
		Queues []struct {
			Name   string
			Depth  int
			Poison struct {
				Name  string
				Depth int
			}
		}
	}
	if err := json.Unmarshal(adaptq("", "stats", "--config", config, "--json"), &stats); err != nil {
		t.Fatal(err)
	}
	if len(stats.Queues) != 1 || stats.Queues[0].Name != "payments" || stats.Queues[0].Depth != 0 || stats.Queues[0].Poison.Depth != 1 {
		t.Errorf("after the run: %+v, want payments empty and the malformed message in payments-poison", stats.Queues)
	}
	var page struct {
		Messages []struct {
			PoisonID string `json:"poison_id"`
			Rule     string
			Reason   string
		}
	}
	if err := json.Unmarshal(adaptq("", "poison", "list", "--config", config, "--queue", "payments", "--json"), &page); err != nil ||
		len(page.Messages) != 1 || page.Messages[0].Rule != "permanent" || !strings.Contains(page.Messages[0].Reason, "malformed payment") {
		t.Fatalf("payments-poison holds %+v (%v), want the malformed message and why", page, err)
	}
	var poisoned struct{ Body string }
	if err := json.Unmarshal(adaptq("", "poison", "show", "--config", config, "--queue", "payments", "--json", page.Messages[0].PoisonID), &poisoned); err != nil || poisoned.Body != "not a payment" {
		t.Errorf("payments-poison holds %+v (%v), want the malformed message", poisoned, err)
	}
}
