//go:build unix

package listener_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
)

// rlimitChild marks the test binary run as the starved worker of
// TestExecOutOfFileDescriptorsIsNotPoisoned.
const rlimitChild = "ADAPTQ_TEST_RLIMIT_CHILD"

// A real exec: handler in a worker whose file descriptors are used up (a
// low RLIMIT_NOFILE, every descriptor taken, as 21,000 idle admin
// connections once did) fails with "too many open files" before its
// program starts: the worker's fault, not the message's. With a maximum
// dequeue count of 1 the message would be poisoned at once; instead it
// stays held and runs again, in the same delivery, once the worker has
// descriptors again.
func TestExecOutOfFileDescriptorsIsNotPoisoned(t *testing.T) {
	if os.Getenv(rlimitChild) != "" {
		starvedWorker(t)
		return
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestExecOutOfFileDescriptorsIsNotPoisoned$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), rlimitChild+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("the starved worker: %v\n%s", err, out.String())
	}
	var poisoned, released, processed int
	var reason string
	for _, line := range strings.Split(out.String(), "\n") {
		if _, after, ok := strings.Cut(line, "RESULT "); ok {
			if _, err := fmt.Sscanf(after, "poisoned=%d released=%d processed=%d reason=%q", &poisoned, &released, &processed, &reason); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
		}
	}
	if !strings.Contains(reason, "too many open files") {
		t.Fatalf("the handler failed with %q, want too many open files\n%s", reason, out.String())
	}
	if poisoned != 0 || released != 0 || processed != 1 {
		t.Fatalf("poisoned %d, released %d, processed %d: want the message run again in place once descriptors are free, not poisoned\n%s", poisoned, released, processed, out.String())
	}
}

// starvedWorker runs in the child: it uses up its file descriptors, runs
// one message through a listener whose exec: handler then cannot start,
// and prints what became of it.
func starvedWorker(t *testing.T) {
	c := clock.NewFake(clock.Epoch)
	store := memory.NewStore(memory.WithClock(c))
	q, _ := store.Queue("work")
	pq, _ := store.Queue("work-poison")
	h, err := handler.Exec([]string{"true"}, handler.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reason string
	rec := func(ctx context.Context, m *queue.Message) error {
		err := h(ctx, m)
		if err != nil {
			mu.Lock()
			reason = err.Error()
			mu.Unlock()
		}
		return err
	}
	l, err := listener.New(q, rec, listener.Options{Poison: pq, MaxDequeueCount: 1, Clock: c, Dispatch: listener.DispatchParallel})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Put(context.Background(), []byte("job"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// Every descriptor in use: lower the soft limit a little above what is
	// open now, and open /dev/null until none is left.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir("/dev/fd")
	lim.Cur = uint64(len(entries) + 16)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("setrlimit: %v", err)
	}
	var held []*os.File
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		held = append(held, f)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := l.Start(ctx, 1); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, "the handler fails", func() bool { return l.Stats().Failed == 1 })
	for _, f := range held {
		_ = f.Close()
	}
	// The pause ends; the message runs again, and the program starts.
	testutil.Eventually(t, time.Minute, "a verdict", func() bool {
		c.AdvanceToNext()
		s := l.Stats()
		return s.Processed+s.Poisoned+s.Released > 0
	})
	s := l.Stats()
	mu.Lock()
	fmt.Printf("RESULT poisoned=%d released=%d processed=%d reason=%q\n", s.Poisoned, s.Released, s.Processed, reason)
	mu.Unlock()
	cancel()
	done := make(chan error, 1)
	go func() { done <- l.Wait() }()
	for {
		select {
		case <-done:
			return
		case <-time.After(10 * time.Millisecond):
			c.AdvanceToNext()
		}
	}
}
