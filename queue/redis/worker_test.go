package redis_test

import (
	"context"
	"fmt"
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
