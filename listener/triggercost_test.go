package listener_test

import (
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/scaling"
)

// Review of issue 27 item 4: the trigger on by default, with the safety
// interval the worker then picks on a backend without native notify
// (idle.max), costs an idle queue no more gets per hour of virtual time
// than no trigger did.
func TestReviewDefaultTriggerCostsNoIdleGets(t *testing.T) {
	t.Parallel()
	idle := scaling.IdleBackoff{Min: time.Second, Max: time.Minute, Delta: time.Second}
	getsPerHour := func(o listener.Options) int64 {
		f := newFixture(t, newRecorder().handle, o)
		start := f.clock.Now()
		f.start()
		for f.clock.Now().Sub(start) < time.Hour {
			f.settle()
			f.clock.AdvanceToNext()
		}
		f.settle()
		gets := int64(f.meter.Snapshot().Gets())
		if err := f.stop(); err != nil {
			t.Fatal(err)
		}
		return gets
	}
	before := getsPerHour(listener.Options{Tasks: 3, Idle: idle})
	after := getsPerHour(listener.Options{Tasks: 3, Idle: idle, Notifier: &listener.LocalNotifier{}, SafetyInterval: idle.Max})
	t.Logf("gets in an idle hour: %d without a trigger, %d with the default one", before, after)
	// Both runs draw their idle delays with random jitter (0.8–1.2), so
	// equal cadences differ by a few gets an hour (77 vs 79 seen): allow a
	// tenth. A trigger that polled on its own would cost a multiple.
	if after > before+before/10 {
		t.Errorf("the default trigger costs %d gets an idle hour, %d without", after, before)
	}
}
