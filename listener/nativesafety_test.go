package listener_test

import (
	"context"
	"testing"
	"time"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/scaling"
)

// Review of issue 27 item 4. On a backend with native notify (PostgreSQL,
// Redis, memory) the worker's default trigger makes idle tasks sleep up to
// trigger.safety_interval, 5 min, instead of idle.max (1 min). But the
// backend notifies only on a put: a message that becomes visible later —
// a delayed put, a failed message's retry, a lease that ran out on a
// crashed worker, a message another worker released as it stopped — comes
// with no notification. Before the default changed it was got within
// idle.max of becoming visible; it must still be.
func TestReviewDefaultTriggerSeesUnnotifiedVisibilityWithinIdleMax(t *testing.T) {
	t.Parallel()
	qc := adaptq.DefaultQueueConfig()
	rec := newRecorder()
	// The fixture's queue is the memory backend, with native notify, as the
	// worker sees it.
	probe := newFixture(t, rec.handle, listener.Options{})
	si := qc.TriggerSafetyInterval(probe.raw.Features())
	idle := scaling.IdleBackoff{Min: time.Second, Max: qc.Idle.Max, Delta: time.Second}
	f := newFixture(t, rec.handle, listener.Options{Tasks: 1, Idle: idle,
		Notifier: &listener.LocalNotifier{}, SafetyInterval: si})
	start := f.clock.Now()
	f.start()
	// Idle for half an hour: the task's sleeps reach their longest.
	for f.clock.Now().Sub(start) < 30*time.Minute {
		f.settle()
		f.clock.AdvanceToNext()
	}
	f.settle() // the task just got nothing and sleeps its longest
	const delay = time.Second
	if _, err := f.raw.Put(context.Background(), []byte("later"), queue.PutOptions{InitialVisibilityDelay: delay}); err != nil {
		t.Fatal(err)
	}
	visible := f.clock.Now().Add(delay)
	for rec.distinct() == 0 {
		f.settle()
		if rec.distinct() > 0 {
			break
		}
		f.clock.AdvanceToNext()
	}
	got := f.clock.Now().Sub(visible)
	t.Logf("safety_interval %s, idle.max %s: got %s after it became visible", si, qc.Idle.Max, got)
	if got > qc.Idle.Max {
		t.Errorf("a message that became visible with no notification waited %s, more than idle.max %s", got, qc.Idle.Max)
	}
}
