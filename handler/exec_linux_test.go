package handler_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
)

// childEnv marks the test binary run as the worker of
// TestExecCommandDiesWithItsWorker; its value is the pid file's path.
const childEnv = "ADAPTQ_TEST_EXEC_WORKER_PIDFILE"

// alive reports whether pid is a running process: not gone, and not a
// zombie waiting for a parent (PID 1 in a container may never reap it).
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) STATE …; comm may hold spaces and parentheses.
	rest := stat[bytes.LastIndexByte(stat, ')')+1:]
	f := strings.Fields(string(rest))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// A worker killed with SIGKILL takes its running exec: command with it:
// the command must not run on while its message comes back to another
// worker.
func TestExecCommandDiesWithItsWorker(t *testing.T) {
	if pidFile := os.Getenv(childEnv); pidFile != "" {
		// The worker: run one message whose command sleeps for ten minutes.
		h := mustExec(t, sh(`echo $$ > "$PIDFILE.tmp" && mv "$PIDFILE.tmp" "$PIDFILE" && exec sleep 600`),
			handler.ExecOptions{Env: []string{"PIDFILE=" + pidFile}})
		_ = h(context.Background(), &queue.Message{ID: "m1", Body: []byte("x"), DequeueCount: 1})
		t.Fatal("the command returned: the parent should have killed this worker first")
	}
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	worker := exec.Command(os.Args[0], "-test.run=^TestExecCommandDiesWithItsWorker$", "-test.count=1")
	worker.Env = append(os.Environ(), childEnv+"="+pidFile)
	var out bytes.Buffer
	worker.Stdout, worker.Stderr = &out, &out
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	// Hang guards only: on a loaded machine these take what they take.
	const guard = 2 * time.Minute
	var pid int
	for deadline := time.Now().Add(guard); ; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			_ = worker.Process.Kill()
			t.Fatalf("the command did not start within %s; worker output:\n%s", guard, out.String())
		}
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if !alive(pid) {
		t.Fatalf("the command (pid %d) is not running before the worker is killed", pid)
	}
	if err := worker.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = worker.Wait()
	for deadline := time.Now().Add(guard); alive(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the command (pid %d) still runs %s after its worker was killed with SIGKILL", pid, guard)
		}
	}
}
