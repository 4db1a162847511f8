package adaptq

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/queue"
)

// A queue's latency_target reaches its listener, and idle.min and
// idle.delta left unset follow it; left out, it is the backend's default.
func TestLatencyTargetReachesTheListener(t *testing.T) {
	cfg := testConfig(t, `
admin: {address: ""}
queues:
  - url: memory://fast
  - url: memory://tuned
    latency_target: 40ms
  - url: sqlite://$DIR/q.db?queue=pinned
    latency_target: 40ms
    idle: {min: 1s, delta: 2s}
`)
	w, err := New(cfg, WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"fast", "tuned", "pinned"} {
		w.MustHandle(name, func(context.Context, *queue.Message) error { return nil })
	}
	runWorker(t, w)
	for _, c := range []struct {
		queue             string
		target, min, delt time.Duration
	}{
		{"fast", 10 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond},
		{"tuned", 40 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond},
		{"pinned", 40 * time.Millisecond, time.Second, 2 * time.Second},
	} {
		l, ok := w.Listener(c.queue)
		if !ok {
			t.Fatalf("no listener for %s", c.queue)
		}
		o := l.Options()
		if o.LatencyTarget != c.target || o.Idle.Min != c.min || o.Idle.Delta != c.delt {
			t.Errorf("%s: target %s, idle %+v; want %s, min %s, delta %s", c.queue, o.LatencyTarget, o.Idle, c.target, c.min, c.delt)
		}
	}
}
