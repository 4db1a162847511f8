package redis_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/scaling"
)

// The multi-process tests run this test binary again as a child
// (TestHelperProcess, switched on by helperEnv): a worker process with the
// adaptive listener on the queue helperURL names, woken by the driver's
// native notify only.
const (
	helperEnv   = "ADAPTQ_REDIS_HELPER" // consume | slow
	helperURL   = "ADAPTQ_REDIS_HELPER_URL"
	helperQueue = "shared"
)

// TestHelperProcess is the child side. It prints "ready" once its listener
// runs and "id ID" for each message its handler ran, and stops on SIGTERM.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("the child process of the multi-process tests")
	}
	if err := helper(mode); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func helper(mode string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	q, err := queue.Open(ctx, os.Getenv(helperURL))
	if err != nil {
		return err
	}
	defer q.Close()
	var pause time.Duration
	vis := time.Minute
	if mode == "slow" {
		pause, vis = 2*time.Millisecond, 2*time.Second
	}
	var mu sync.Mutex
	h := func(ctx context.Context, m *queue.Message) error {
		time.Sleep(pause)
		mu.Lock()
		fmt.Printf("id %s\n", m.ID) // os.Stdout is unbuffered: written when Printf returns
		mu.Unlock()
		return nil
	}
	l, err := nativeListener(ctx, q, h, vis)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	return l.Run(ctx)
}

// nativeListener is a listener that only the driver's native notify can
// wake once idle: its idle sleeps and safety interval are an hour. A
// goroutine forwards q.Subscribe's signals to the listener's trigger, as
// the worker does with trigger.enabled.
func nativeListener(ctx context.Context, q *queue.Queue, h func(context.Context, *queue.Message) error, vis time.Duration) (*listener.Listener, error) {
	return nativeListenerPolling(ctx, q, h, vis, time.Hour)
}

// nativeListenerPolling is nativeListener whose idle sleeps and safety
// interval are safety.
func nativeListenerPolling(ctx context.Context, q *queue.Queue, h func(context.Context, *queue.Message) error, vis, safety time.Duration) (*listener.Listener, error) {
	var n listener.LocalNotifier
	sig, err := q.Subscribe(ctx)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				n.Notify(q.Name())
			}
		}
	}()
	return listener.New(q, h, listener.Options{
		Tasks: 2, MinTasks: 1, MaxTasks: 4,
		BatchSize: queue.MaxBatchSize, Concurrency: 4 * queue.MaxBatchSize,
		VisibilityTimeout: vis,
		Idle:              scaling.IdleBackoff{Min: safety, Max: safety, Delta: time.Second},
		Notifier:          &n,
		SafetyInterval:    safety,
		ShutdownGrace:     5 * time.Second,
	})
}

// child starts the helper in mode on the queue at url.
func child(t *testing.T, mode, url string) (*exec.Cmd, io.ReadCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperURL+"="+url)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, out
}

// handledIDs collects what children print.
type handledIDs struct {
	mu    sync.Mutex
	runs  map[string]int
	by    map[string]map[string]int // child → id → runs
	ready map[string]chan struct{}
}

func newHandledIDs() *handledIDs {
	return &handledIDs{runs: map[string]int{}, by: map[string]map[string]int{}, ready: map[string]chan struct{}{}}
}

// read consumes a child's output under name; it returns when the child's
// stdout closes.
func (h *handledIDs) read(name string, r io.Reader) <-chan error {
	ready := make(chan struct{})
	h.mu.Lock()
	h.ready[name] = ready
	h.by[name] = map[string]int{}
	h.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			line := sc.Text()
			if line == "ready" {
				close(ready)
				continue
			}
			if id, ok := strings.CutPrefix(line, "id "); ok {
				h.add(name, id)
			}
		}
		done <- sc.Err()
	}()
	return done
}

func (h *handledIDs) add(name, id string) {
	h.mu.Lock()
	h.runs[id]++
	if h.by[name] == nil {
		h.by[name] = map[string]int{}
	}
	h.by[name][id]++
	h.mu.Unlock()
}

func (h *handledIDs) waitReady(t *testing.T, name string) {
	t.Helper()
	h.mu.Lock()
	ch := h.ready[name]
	h.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("child %s did not start within a minute", name)
	}
}

func (h *handledIDs) covers(ids map[string]bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id := range ids {
		if h.runs[id] == 0 {
			return false
		}
	}
	return true
}

func (h *handledIDs) count(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.by[name])
}

// eventually polls cond every 20 ms until it holds or a generous guard
// against a hang passes.
func eventually(t *testing.T, guard time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %s", what, guard)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTwoProcesses: two idle worker processes, which only the driver's
// native notify can wake, share the messages this process puts in bursts:
// every message is handled exactly once, and both children take part.
func TestTwoProcesses(t *testing.T) {
	c, prefix := newClient(t)
	q := mustQueue(t, c, helperQueue)
	url := queueURL(helperQueue, prefix, "")
	h := newHandledIDs()
	var cmds []*exec.Cmd
	var reads []<-chan error
	for _, name := range []string{"a", "b"} {
		cmd, out := child(t, "consume", url)
		cmds = append(cmds, cmd)
		reads = append(reads, h.read(name, out))
		h.waitReady(t, name)
	}
	ids := map[string]bool{}
	const bursts, perBurst = 5, 400
	for b := range bursts {
		// Let the children fall idle (an hour's sleep) between bursts.
		time.Sleep(200 * time.Millisecond)
		for i := range perBurst {
			ids[mustPut(t, q, fmt.Sprintf("b%d-%d", b, i), queue.PutOptions{})] = true
		}
		eventually(t, time.Minute, fmt.Sprintf("burst %d handled", b), func() bool { return h.covers(ids) })
	}
	eventually(t, time.Minute, "the queue is empty", func() bool {
		n, err := q.Count(context.Background())
		return err == nil && n == 0
	})
	for _, cmd := range cmds {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	for i, cmd := range cmds {
		if err := <-reads[i]; err != nil {
			t.Error(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("child %d: %v", i, err)
		}
	}
	for id, n := range h.runs {
		if n != 1 {
			t.Errorf("message %s handled %d times", id, n)
		}
		if !ids[id] {
			t.Errorf("handled unknown id %s", id)
		}
	}
	t.Logf("child a handled %d, child b %d", h.count("a"), h.count("b"))
	if h.count("a") == 0 || h.count("b") == 0 {
		t.Errorf("one child did all the work (a %d, b %d): the backlog's wake-up did not reach the other", h.count("a"), h.count("b"))
	}
}

// TestSIGKILLLosesNothing: a worker process is killed with SIGKILL in the
// middle of a backlog. The messages it held come back when their
// visibility timeout (2 s) ends, and a second consumer handles them: none
// is lost.
func TestSIGKILLLosesNothing(t *testing.T) {
	c, prefix := newClient(t)
	q := mustQueue(t, c, helperQueue)
	ids := map[string]bool{}
	for i := range 2000 {
		ids[mustPut(t, q, fmt.Sprint(i), queue.PutOptions{})] = true
	}
	h := newHandledIDs()
	cmd, out := child(t, "slow", queueURL(helperQueue, prefix, ""))
	read := h.read("victim", out)
	h.waitReady(t, "victim")
	eventually(t, time.Minute, "the victim handles 300 messages", func() bool { return h.count("victim") >= 300 })
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	werr := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child did not die of SIGKILL: %v", werr)
	}
	<-read
	killedAt := h.count("victim")

	// The survivor: a plain get/delete loop in this process.
	ctx := context.Background()
	redelivered := 0
	eventually(t, 2*time.Minute, "every message handled and the queue empty", func() bool {
		for {
			ms, err := q.Get(ctx, queue.MaxBatchSize, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) == 0 {
				break
			}
			rs := make([]queue.Receipt, len(ms))
			for i, m := range ms {
				h.add("survivor", m.ID)
				if m.DequeueCount > 1 {
					redelivered++
				}
				rs[i] = queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt}
			}
			res, err := q.DeleteBatch(ctx, rs)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range res {
				if r != nil {
					t.Fatalf("delete %s: %v", rs[i].ID, r)
				}
			}
		}
		n, err := q.Count(ctx)
		return err == nil && n == 0 && h.covers(ids)
	})
	lost := 0
	for id := range ids {
		if h.runs[id] == 0 {
			lost++
		}
	}
	t.Logf("the victim handled %d before SIGKILL; the survivor %d, %d of them redelivered (held by the victim)", killedAt, h.count("survivor"), redelivered)
	if lost != 0 {
		t.Fatalf("%d messages lost", lost)
	}
	if redelivered == 0 {
		t.Error("no message came back from the killed worker: the kill landed after it had deleted everything it held")
	}
}
