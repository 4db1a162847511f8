package redis_test

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/queue"
)

// TestWorkerWakesOnNativeNotify runs the worker host on a redis:// URL with
// trigger.enabled and idle sleeps of an hour: only the driver's native
// notify, which the worker subscribes to by itself, can wake it. Messages
// put by another client (another process to the server) are handled, and
// a failing one lands in the poison queue, a sibling on the same server.
func TestWorkerWakesOnNativeNotify(t *testing.T) {
	_, prefix := newClient(t)
	cfg, err := adaptq.ParseConfig("test.yaml", []byte(fmt.Sprintf(`
log: {level: error}
admin: {address: ""}
queues:
  - url: %q
    trigger: {enabled: true, safety_interval: 1h}
    idle: {min: 1h, max: 1h}
    max_dequeue_count: 1
`, queueURL("events", prefix, ""))))
	if err != nil {
		t.Fatal(err)
	}
	w, err := adaptq.New(cfg, adaptq.WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 100)
	w.MustHandle("events", func(_ context.Context, m *queue.Message) error {
		if string(m.Body) == "bad" {
			return fmt.Errorf("this one fails")
		}
		got <- string(m.Body)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-w.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not start")
	}
	l, _ := w.Listener("events")
	eventually(t, 30*time.Second, "the worker falls idle", func() bool {
		st, err := l.State(ctx)
		return err == nil && st.IdleTasks >= 1
	})
	producer := mustQueue(t, otherProcess(t, prefix), "events")
	for i := range 3 {
		want := fmt.Sprint("wake-", i)
		mustPut(t, producer, want, queue.PutOptions{})
		select {
		case b := <-got:
			if b != want {
				t.Fatalf("handled %q, want %q", b, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("put %d: the idle worker was not woken within 30 s", i)
		}
		time.Sleep(100 * time.Millisecond) // idle again
	}
	mustPut(t, producer, "bad", queue.PutOptions{})
	poison := mustQueue(t, otherProcess(t, prefix), "events-poison")
	eventually(t, 30*time.Second, "the failing message is poisoned", func() bool {
		n, err := poison.Count(ctx)
		return err == nil && n == 1
	})
	if st := l.Stats(); st.Triggers < 3 {
		t.Errorf("%d triggers counted, want at least 3", st.Triggers)
	}
}

// syncBuffer is a bytes.Buffer safe for the exec handler's writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestExampleConfigRuns loads configs/redis.yaml as it is, but for a key
// prefix of the test's own (and the test server, if ADAPTQ_TEST_REDIS_URL
// names another) and no admin endpoint, runs the worker, and checks that
// its exec handler handles a message put by another client.
func TestExampleConfigRuns(t *testing.T) {
	_, prefix := newClient(t)
	cfg, err := adaptq.LoadConfig("../../configs/redis.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Queues) != 1 || !cfg.Queues[0].Trigger.Enabled {
		t.Fatalf("the example config changed: %+v", cfg.Queues)
	}
	u, err := url.Parse(cfg.Queues[0].URL)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := url.Parse(serverURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Host, u.Path = srv.Host, srv.Path
	qs := u.Query()
	qs.Set("prefix", prefix)
	u.RawQuery = qs.Encode()
	cfg.Queues[0].URL = u.String()
	cfg.Admin.Address = ""
	var out syncBuffer
	w, err := adaptq.New(cfg, adaptq.WithLogger(zap.NewNop()), adaptq.WithExecOutput(&out, &out))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-w.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not start")
	}
	producer := mustQueue(t, otherProcess(t, prefix), "orders")
	id := mustPut(t, producer, "order 1001", queue.PutOptions{})
	want := "handled " + id + " (try 1): order 1001"
	eventually(t, time.Minute, "the exec handler ran", func() bool { return strings.Contains(out.String(), want) })
}
