//go:build unix

package sqs_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/sqs"
	"github.com/adaptq/adaptq/queue/sqs/sqstest"
)

// The kill test runs this test binary again as a child process
// (TestHelperConsumer, switched on by helperEnv) that consumes the queue
// with a listener until it is killed.
const (
	helperEnv      = "ADAPTQ_SQS_HELPER_URL" // the queue's sqs:// URL
	killMessages   = 3000
	killVisibility = 2 * time.Second
)

// TestHelperConsumer is the child side: it prints "id N" for every message
// it handled (before the listener deletes it), until killed.
func TestHelperConsumer(t *testing.T) {
	u := os.Getenv(helperEnv)
	if u == "" {
		t.Skip("the child process of TestKilledConsumerLosesNothing")
	}
	q, err := queue.Open(context.Background(), u)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	o := listenerOptions(killVisibility)
	l, err := listener.New(q, func(_ context.Context, m *queue.Message) error {
		mu.Lock()
		fmt.Printf("id %s\n", m.ID)
		mu.Unlock()
		time.Sleep(time.Millisecond)
		return nil
	}, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	_ = l.Run(context.Background())
	os.Exit(0)
}

// TestKilledConsumerLosesNothing kills (SIGKILL) a consumer process midway
// through 3,000 messages: every message is still handled, by it or, once
// the visibility timeout of those it held ends, by a second consumer, and
// the queue ends empty. At least once: none lost.
func TestKilledConsumerLosesNothing(t *testing.T) {
	t.Parallel()
	srv := sqstest.Shared(t)
	region := sqstest.NewRegion()
	c := newClient(t, srv, sqs.Config{Region: region})
	q := openQueue(t, c, "killed")
	ids := fill(t, q, killMessages)

	cmd := exec.Command(os.Args[0], "-test.run", "^TestHelperConsumer$", "-test.v=false")
	cmd.Env = append(os.Environ(), helperEnv+"="+srv.URL(region, "killed"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &handled{runs: map[string]int{}}
	seen := make(chan struct{})
	go func() {
		defer close(seen)
		sc := bufio.NewScanner(out)
		n := 0
		for sc.Scan() {
			id, ok := strings.CutPrefix(sc.Text(), "id ")
			if !ok {
				continue
			}
			h.mu.Lock()
			h.runs[id]++
			h.mu.Unlock()
			if n++; n == killMessages/2 {
				_ = cmd.Process.Signal(syscall.SIGKILL)
			}
		}
	}()
	<-seen
	_ = cmd.Wait()
	byChild := h.count()
	if byChild >= killMessages {
		t.Fatalf("the child handled all %d messages before the kill", byChild)
	}

	l, err := listener.New(q, h.handle, listenerOptions(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, l, 3*time.Minute, func() bool {
		if h.missing(ids) > 0 {
			return false
		}
		n, err := q.Count(ctx)
		return err == nil && n == 0
	})
	t.Logf("the child handled %d before SIGKILL; the second consumer %+v", byChild, l.Stats())
	for id := range h.runs {
		if !ids[id] {
			t.Errorf("handled unknown id %s", id)
		}
	}
}
