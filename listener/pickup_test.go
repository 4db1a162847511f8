package listener_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
)

// Pickup latency counts the time from put to the first get of each message;
// a redelivery, whose wait since its last visibility timeout is unknown,
// is not counted.
func TestPickupLatencyCountsFirstDeliveries(t *testing.T) {
	t.Parallel()
	var failedOnce atomic.Bool
	var firstID atomic.Value
	h := func(_ context.Context, m *queue.Message) error {
		if m.ID == firstID.Load() && failedOnce.CompareAndSwap(false, true) {
			return errors.New("first run fails")
		}
		return nil
	}
	f := newFixture(t, h, listener.Options{Tasks: 1, MaxTasks: 1, BatchSize: 4, VisibilityTimeout: 10 * time.Second, Idle: scalingIdle(time.Second)})
	ids := f.put(3)
	firstID.Store(ids[0])
	const waited = 7 * time.Second
	f.clock.Advance(waited)
	f.start()
	eventually(t, "two processed, one failed", func() bool {
		s := f.l.Stats()
		return s.Processed == 2 && s.Failed == 1
	})
	if s := f.l.Stats(); s.PickedUp != 3 || s.PickupLatency != 3*waited {
		t.Fatalf("after the first get: %d picked up in %s, want 3 in %s", s.PickedUp, s.PickupLatency, 3*waited)
	}
	// The failed message reappears after its visibility timeout.
	eventually(t, "the failed message runs again", func() bool {
		if f.l.Stats().Processed == 3 {
			return true
		}
		f.clock.AdvanceToNext()
		return false
	})
	if s := f.l.Stats(); s.PickedUp != 3 || s.PickupLatency != 3*waited {
		t.Errorf("after the redelivery: %d picked up in %s, want still 3 in %s", s.PickedUp, s.PickupLatency, 3*waited)
	}
}
