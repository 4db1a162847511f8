package listener_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue/meter"
)

func TestTriggerWakesTheLongSleepAndIdleCostsTwelveCallsAnHour(t *testing.T) {
	var n listener.LocalNotifier
	var detected atomic.Int32
	rec := newRecorder()
	f := newFixture(t, rec.handle, listener.Options{
		Tasks:        4,
		Notifier:     &n,
		WorkDetected: func(*listener.Listener) { detected.Add(1) },
	})
	f.start()
	// Idle: tasks stop down to one, whose sleep grows to the safety interval.
	longest := time.Duration(0)
	for end := f.clock.Now().Add(2 * time.Hour); f.clock.Now().Before(end); {
		f.settle()
		for _, d := range f.clock.Deadlines() {
			longest = max(longest, d)
		}
		f.clock.AdvanceToNext()
	}
	if got := f.l.ActiveTasks(); got != 1 {
		t.Fatalf("%d tasks idle with a trigger, want 1", got)
	}
	if longest != listener.DefaultSafetyInterval {
		t.Fatalf("longest idle sleep %s, want the safety interval %s", longest, listener.DefaultSafetyInterval)
	}
	before := f.meter.Snapshot().Calls[meter.GetEmpty]
	for end := f.clock.Now().Add(time.Hour); f.clock.Now().Before(end); {
		f.settle()
		f.clock.AdvanceToNext()
	}
	if idle := f.meter.Snapshot().Calls[meter.GetEmpty] - before; idle > 13 {
		t.Fatalf("%d empty gets in an idle hour with a trigger, want about 12", idle)
	}

	// The task sleeps up to five minutes; a trigger wakes it at once: the
	// clock does not move.
	f.settle()
	at := f.clock.Now()
	f.put(3)
	n.Notify("work")
	eventually(t, "the triggered messages are handled", func() bool { return rec.distinct() == 3 })
	if !f.clock.Now().Equal(at) {
		t.Fatal("the clock moved: the message was picked up by polling, not by the trigger")
	}
	if s := f.l.Stats(); s.Triggers != 1 {
		t.Errorf("Triggers = %d", s.Triggers)
	}
	if detected.Load() < 1 {
		t.Error("a trigger did not fire WorkDetected")
	}
	// Notifies of other queues do nothing.
	f.settle()
	f.put(1)
	n.Notify("other")
	f.settle()
	if rec.distinct() != 3 {
		t.Fatal("another queue's trigger woke this listener")
	}
	// A lost trigger: the safety poll finds the message within the interval.
	f.clock.Advance(listener.DefaultSafetyInterval)
	eventually(t, "the safety poll finds the untriggered message", func() bool { return rec.distinct() == 4 })
}

func TestLocalNotifierUnsubscribe(t *testing.T) {
	var n listener.LocalNotifier
	a, stopA := n.Subscribe("q1q")
	b, stopB := n.Subscribe("q1q")
	n.Notify("q1q")
	n.Notify("q1q") // merges with the pending one
	for _, ch := range []<-chan struct{}{a, b} {
		select {
		case <-ch:
		default:
			t.Fatal("subscriber not signalled")
		}
		select {
		case <-ch:
			t.Fatal("two signals pending; they should merge")
		default:
		}
	}
	stopA()
	stopA()
	n.Notify("q1q")
	select {
	case <-a:
		t.Fatal("signal after unsubscribe")
	default:
	}
	<-b
	stopB()
	_ = context.Background()
}
