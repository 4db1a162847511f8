package postgres_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// The multi-process tests run this test binary again as a worker process
// (TestHelperWorker, switched on by helperURL): an adaptq.Worker on the
// queue at that URL, with a push trigger and a ten-minute safety interval,
// so that while the test lasts it learns of new messages only from the
// database's notifications. It prints "handled ID" for every message its
// handler ran.
const helperURL = "ADAPTQ_PG_HELPER_URL"

func TestHelperWorker(t *testing.T) {
	u := os.Getenv(helperURL)
	if u == "" {
		t.Skip("the child process of the multi-process tests")
	}
	if err := runHelperWorker(u); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runHelperWorker(u string) error {
	cfg, err := adaptq.ParseConfig("helper.yaml", []byte(fmt.Sprintf(`
log: {level: error}
admin: {address: ""}
queues:
  - url: %q
    name: work
    handler: h
    visibility_timeout: 2s
    idle: {max: 1s}
    trigger: {enabled: true, safety_interval: 10m}
`, u)))
	if err != nil {
		return err
	}
	w, err := adaptq.New(cfg, adaptq.WithLogger(zap.NewNop()))
	if err != nil {
		return err
	}
	var mu sync.Mutex
	if err := w.Handle("h", func(_ context.Context, m *queue.Message) error {
		mu.Lock()
		fmt.Printf("handled %s\n", m.ID) // os.Stdout is unbuffered
		mu.Unlock()
		return nil
	}); err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		// The parent closes stdin to stop the worker.
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	return w.Run(ctx)
}

// worker is a child worker process.
type worker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan error
}

// handledSet collects the ids the workers printed.
type handledSet struct {
	mu  sync.Mutex
	ids map[string]int
}

func (h *handledSet) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ids)
}

func startWorker(t *testing.T, u string, h *handledSet) *worker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWorker$")
	cmd.Env = append(os.Environ(), helperURL+"="+u)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &worker{cmd: cmd, stdin: stdin, done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if id, ok := strings.CutPrefix(sc.Text(), "handled "); ok {
				h.mu.Lock()
				h.ids[id]++
				h.mu.Unlock()
			}
		}
		w.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-w.done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-w.done
		}
	})
	return w
}

// waitFor polls cond; the timeout only guards against a hang, and is at
// least testutil.HangGuard (testutil.Guard), so that a machine slowed by
// load cannot fail a test by it.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	timeout = testutil.Guard(timeout)
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func putMany(t *testing.T, q *queue.Queue, n int) map[string]bool {
	t.Helper()
	ids := make(map[string]bool, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for p := 0; p < 4; p++ {
		wg.Go(func() {
			for i := p; i < n; i += 4 {
				id, err := q.Put(context.Background(), []byte(fmt.Sprintf("m-%d", i)), queue.PutOptions{})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				ids[id] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	return ids
}

func checkAllHandled(t *testing.T, put map[string]bool, h *handledSet) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	missing := 0
	for id := range put {
		if h.ids[id] == 0 {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d messages were never handled", missing, len(put))
	}
}

// TestTwoWorkerProcesses: two idle worker processes, woken only by the
// notifications of Puts made in this (a third) process, drain the queue
// between them; every message is handled.
func TestTwoWorkerProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	schema := pgtest.Schema(t)
	u := pgtest.QueueURL(t, schema, "work", "")
	q, err := queue.Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	h := &handledSet{ids: map[string]int{}}
	startWorker(t, u, h)
	startWorker(t, u, h)
	// Let both fall idle (their first polls find nothing) before the puts.
	time.Sleep(2 * time.Second)
	put := putMany(t, q, 2000)
	waitFor(t, 2*time.Minute, "the queue to drain", func() bool {
		n, err := q.Count(context.Background())
		return err == nil && n == 0
	})
	checkAllHandled(t, put, h)
}

// TestSIGKILLLosesNothing kills a worker process with SIGKILL in the middle
// of a backlog; a second worker handles everything the first did not
// delete, after the visibility timeout. Nothing is lost.
func TestSIGKILLLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	schema := pgtest.Schema(t)
	u := pgtest.QueueURL(t, schema, "work", "")
	q, err := queue.Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	put := putMany(t, q, 3000)
	h := &handledSet{ids: map[string]int{}}
	first := startWorker(t, u, h)
	waitFor(t, time.Minute, "the first worker to handle 300 messages", func() bool { return h.len() >= 300 })
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.done
	first.done <- nil // for the cleanup
	startWorker(t, u, h)
	waitFor(t, 2*time.Minute, "the queue to drain", func() bool {
		n, err := q.Count(context.Background())
		return err == nil && n == 0
	})
	checkAllHandled(t, put, h)
}
