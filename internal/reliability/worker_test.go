package reliability

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/queue"
	_ "github.com/adaptq/adaptq/queue/sqlite"

	"github.com/adaptq/adaptq/internal/testutil"
)

// The worker's settings, passed to the child in its environment.
const (
	envChild       = "ADAPTQ_RELIABILITY_WORKER"
	envDB          = "RELIABILITY_DB"
	envRecord      = "RELIABILITY_RECORD"
	envHandlerTime = "RELIABILITY_HANDLER_TIME"
	envGrace       = "RELIABILITY_GRACE"
	envVisibility  = "RELIABILITY_VISIBILITY"
)

// Pool limits of the worker under test; they bound what can be in flight.
const (
	workerMaxTasks    = 4
	workerConcurrency = 64
	workerBatch       = 32
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		os.Exit(workerMain())
	}
	os.Exit(m.Run())
}

// workerMain is the worker process: one queue on a SQLite file, a handler
// that takes RELIABILITY_HANDLER_TIME and then appends the message id to a
// record file with one write(2), which survives SIGKILL.
func workerMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	handlerTime, _ := time.ParseDuration(os.Getenv(envHandlerTime))
	grace, _ := time.ParseDuration(os.Getenv(envGrace))
	vis, _ := time.ParseDuration(os.Getenv(envVisibility))
	record, err := os.OpenFile(os.Getenv(envRecord), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg := adaptq.DefaultConfig()
	cfg.Admin.Address = ""
	qc := adaptq.DefaultQueueConfig()
	qc.URL = "sqlite://" + os.Getenv(envDB) + "?queue=work"
	qc.VisibilityTimeout = vis
	qc.ShutdownGrace = grace
	qc.Concurrency = workerConcurrency
	qc.BatchSize = workerBatch
	qc.Pool.Max = workerMaxTasks
	qc.Pool.Initial = workerMaxTasks
	qc.Idle.Max = 200 * time.Millisecond
	cfg.Queues = []adaptq.QueueConfig{qc}
	w, err := adaptq.New(cfg, adaptq.WithLogger(zap.NewNop()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	w.MustHandle("work", func(ctx context.Context, m *queue.Message) error {
		if handlerTime > 0 {
			select {
			case <-time.After(handlerTime):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		_, err := record.WriteString(m.ID + "\n")
		return err
	})
	go func() {
		<-w.Ready()
		fmt.Println("ready")
	}()
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// worker is a running worker process.
type worker struct {
	cmd  *exec.Cmd
	done chan error
}

func startWorker(t *testing.T, db, record string, handlerTime, grace, vis time.Duration) *worker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=1", envDB+"="+db, envRecord+"="+record,
		envHandlerTime+"="+handlerTime.String(), envGrace+"="+grace.String(), envVisibility+"="+vis.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &worker{cmd: cmd, done: make(chan error, 1)}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(ready)
			}
		}
		w.done <- cmd.Wait()
	}()
	select {
	case <-ready:
	case err := <-w.done:
		t.Fatalf("worker exited before it was ready: %v", err)
	case <-time.After(testutil.HangGuard):
		_ = cmd.Process.Kill()
		t.Fatal("worker not ready")
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return w
}

// wait waits for the worker to exit and returns its exit error.
func (w *worker) wait(t *testing.T, limit time.Duration) error {
	t.Helper()
	select {
	case err := <-w.done:
		return err
	case <-time.After(limit):
		_ = w.cmd.Process.Kill()
		t.Fatalf("worker did not exit within %s", limit)
		return nil
	}
}

// readRecord counts how often each id was recorded.
func readRecord(t *testing.T, path string) map[string]int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, line := range strings.Split(string(data), "\n") {
		if line != "" {
			seen[line]++
		}
	}
	return seen
}

func lines(path string) int {
	data, _ := os.ReadFile(path)
	return strings.Count(string(data), "\n")
}

// fill puts n messages and returns their ids.
func fill(t *testing.T, q *queue.Queue, n int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for i := 0; i < n; i++ {
		id, err := q.Put(context.Background(), []byte(strconv.Itoa(i)), queue.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func openQueue(t *testing.T, db string) *queue.Queue {
	t.Helper()
	q, err := queue.Open(context.Background(), "sqlite://"+db+"?queue=work")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

func paths(t *testing.T) (db, record string) {
	dir := t.TempDir()
	return filepath.Join(dir, "work.db"), filepath.Join(dir, "record.txt")
}
