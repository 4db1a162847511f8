package listener_test

import (
	"context"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/scaling"
)

// Tasks parked on a rate limit's tokens obey Resize and shutdown at once,
// without the clock moving on: no token wait outlives the run, and the
// messages not started stay visible.
func TestRateWaitingTasksResizeAndStop(t *testing.T) {
	rec := newRecorder()
	f := newFixture(t, rec.handle, listener.Options{Tasks: 3, RateLimit: listener.RateLimit{PerSecond: 1.0 / 3600, Burst: 1}})
	f.put(5)
	f.start()
	eventually(t, "one ran, three tasks parked on the rate", func() bool {
		return rec.distinct() == 1 && f.l.ParkedTasks() == 3 && f.l.LocalState().InFlight == 0
	})
	f.l.Resize(1)
	eventually(t, "two tasks stopped", func() bool { return f.l.ActiveTasks() == 1 })
	f.cancel()
	f.cancel = nil
	select {
	case err := <-f.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testutil.HangGuard): // a hang guard: the outcome does not depend on it
		t.Fatal("Wait did not return with a task parked on the rate limit")
	}
	if d, st := f.depth(), f.l.LocalState(); d != 4 || st.InFlight != 0 || rec.distinct() != 1 {
		t.Fatalf("depth %d, in flight %d, ran %d; want 4, 0, 1", d, st.InFlight, rec.distinct())
	}
	ms, err := f.raw.Peek(context.Background(), 32)
	if err != nil || len(ms) != 4 {
		t.Fatalf("%d visible (%v), want the 4 not started", len(ms), err)
	}
}

// With the adaptive limit at its minimum and a handler that blocks, the
// other tasks wait for a slot, holding nothing; shutdown ends them, the
// running message is handed back, and nothing is counted in flight.
func TestAdaptiveSlotWaitersStop(t *testing.T) {
	started := make(chan string, 10)
	h := func(ctx context.Context, m *queue.Message) error {
		started <- m.ID
		<-ctx.Done()
		return ctx.Err()
	}
	f := newFixture(t, h, listener.Options{Tasks: 3, Adaptive: &scaling.AIMDOptions{Min: 1, Max: 8}})
	f.put(5)
	f.start()
	<-started
	eventually(t, "one runs", func() bool { return f.l.LocalState().InFlight == 1 })
	if ms, _ := f.raw.Peek(context.Background(), 32); len(ms) != 4 {
		t.Fatalf("%d visible while one runs at a limit of 1, want 4", len(ms))
	}
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	if d, st := f.depth(), f.l.LocalState(); d != 5 || st.InFlight != 0 || len(started) != 0 {
		t.Fatalf("depth %d, in flight %d, %d more started; want 5, 0, 0", d, st.InFlight, len(started))
	}
	if ms, _ := f.raw.Peek(context.Background(), 32); len(ms) != 5 {
		t.Fatalf("%d visible after shutdown, want all 5 (the running one handed back)", len(ms))
	}
}
