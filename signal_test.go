package adaptq

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/scaling"
)

// gatedWorker runs a worker on yaml whose handler "work" lets the first
// pass messages through and holds every later one until the test ends, so
// that the queue keeps a known backlog. c is the worker's clock.
func gatedWorker(t *testing.T, yaml string, c clock.Clock, pass int64) *Worker {
	t.Helper()
	w, err := New(testConfig(t, yaml), WithLogger(zap.NewNop()), withClock(c))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var n atomic.Int64
	w.MustHandle("work", func(ctx context.Context, _ *queue.Message) error {
		if n.Add(1) <= pass {
			return nil
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	runWorker(t, w)
	t.Cleanup(func() { close(release) }) // before the worker stops
	return w
}

// With a busy minute measured, the signal sizes the instances by the
// drain rate: 300 messages deleted in 30 s is 10 a second, so 700 left
// drain within the 20 s target with ceil(700 / (10 × 20)) = 4 instances.
func TestScalingSignalUsesTheMeasuredDrainRate(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("scaling-rate")
	url := "memory://" + name
	putN(t, url, 1000)
	fake := clock.NewFake(time.Time{})
	w := gatedWorker(t, `
admin: {address: "127.0.0.1:0", token: scaling-Dg3mQx8tWv}
queues:
  - url: `+url+`
    handler: work
    instances: {target_drain_time: 20s, messages_per_instance: 100, max: 50}
`, fake, 300)
	l, _ := w.Listener(name)
	// Deletes are flushed in batches, on the worker's clock.
	waitUntil(t, "300 messages deleted", func() bool {
		if l.Stats().Deleted == 300 {
			return true
		}
		fake.Advance(5 * time.Millisecond)
		return false
	})
	for at := fake.Now().Truncate(time.Second); at.Before(clock.Epoch.Add(30 * time.Second)); {
		at = at.Add(time.Second)
		fake.Set(at)
	}
	if got := adminRequest(t, w.AdminAddress(), "GET", admin.ScalingPath, "", ""); got != http.StatusUnauthorized {
		t.Errorf("GET %s without the token: %d, want 401", admin.ScalingPath, got)
	}
	var s admin.Scaling
	getJSON(t, w.AdminAddress(), "scaling-Dg3mQx8tWv", admin.ScalingPath, &s)
	if len(s.Queues) != 1 {
		t.Fatalf("signal of %d queues: %+v", len(s.Queues), s)
	}
	q := s.Queues[0]
	if q.Name != name || q.Depth != 700 || time.Duration(q.DrainWindow) != 30*time.Second || q.DrainRate != 10 || !q.Busy {
		t.Errorf("measured: %+v", q)
	}
	if q.DesiredInstances != 4 || q.Basis != scaling.BasisDrainRate || s.DesiredInstances != 4 {
		t.Errorf("desired %d (%s), total %d; want 4 from the drain rate", q.DesiredInstances, q.Basis, s.DesiredInstances)
	}
	if time.Duration(q.TargetDrainTime) != 20*time.Second || q.MessagesPerInstance != 100 || q.MinInstances != 1 || q.MaxInstances != 50 {
		t.Errorf("policy: %+v", q)
	}
}

// Before any message is deleted there is no rate: one instance per
// messages_per_instance waiting (in flight included), and the worker's
// figure is the most any queue asks for. An empty queue asks for min.
func TestScalingSignalFallsBackToMessagesPerInstance(t *testing.T) {
	t.Parallel()
	url := "memory://" + uniqueQueue("scaling-fallback")
	putN(t, url, 1000)
	w := gatedWorker(t, `
admin: {address: "127.0.0.1:0"}
queues:
  - url: `+url+`
    handler: work
    instances: {messages_per_instance: 100, max: 8}
  - url: memory://`+uniqueQueue("scaling-empty")+`
    handler: work
    instances: {min: 2}
`, clock.Real, 0)
	var s admin.Scaling
	getJSON(t, w.AdminAddress(), "", admin.ScalingPath, &s)
	if len(s.Queues) != 2 {
		t.Fatalf("signal of %d queues: %+v", len(s.Queues), s)
	}
	full, empty := s.Queues[0], s.Queues[1]
	if full.Depth != 1000 || full.DesiredInstances != 8 || full.Basis != scaling.BasisMessagesPerInstance || full.Busy {
		t.Errorf("1,000 waiting, 100 an instance, max 8: %+v", full)
	}
	if empty.Depth != 0 || empty.DesiredInstances != 2 || empty.Basis != scaling.BasisEmpty {
		t.Errorf("empty queue, min 2: %+v", empty)
	}
	// The default messages_per_instance is a full pool: pool.max × pool.messages_per_task.
	if want := 100 * 32; empty.MessagesPerInstance != want {
		t.Errorf("default messages_per_instance %d, want %d", empty.MessagesPerInstance, want)
	}
	if s.DesiredInstances != 8 {
		t.Errorf("worker's desired instances %d, want the largest queue's 8", s.DesiredInstances)
	}
}
