package listener_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/scaling"
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

	// The task sleeps up to five minutes; a trigger wakes it within
	// idle.min (no sooner than idle.min after its last empty get).
	f.settle()
	at := f.clock.Now()
	f.put(3)
	n.Notify("work")
	for rec.distinct() < 3 {
		if f.clock.Now().Sub(at) > scaling.DefaultMinIdle {
			t.Fatalf("not handled %s after the trigger; the task sleeps up to %s", f.clock.Now().Sub(at), listener.DefaultSafetyInterval)
		}
		if next, ok := f.clock.NextDeadline(); ok && next.Sub(at) <= scaling.DefaultMinIdle {
			f.clock.AdvanceToNext()
		}
		time.Sleep(100 * time.Microsecond)
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

// A trickle of triggered puts is fetched in batches: a woken task gets no
// sooner than idle.min after its last empty get, instead of one get and
// one empty get per message. (The cost-first target's 100 ms floor.)
func TestTriggerWaitsForTheFloorAfterAnEmptyGet(t *testing.T) {
	var n listener.LocalNotifier
	rec := newRecorder()
	f := newFixture(t, rec.handle, listener.Options{Notifier: &n, LatencyTarget: listener.DefaultLatencyTargetBilled})
	f.start()
	f.settle() // an empty get at T, then a sleep of at least idle.min
	gets := f.meter.Snapshot().Gets()
	f.clock.Advance(10 * time.Millisecond)
	f.put(1)
	n.Notify("work")
	floor := scaling.DefaultMinIdle - 10*time.Millisecond
	eventually(t, "the woken task waits out the floor", func() bool {
		ds := f.clock.Deadlines()
		return len(ds) == 1 && ds[0] == floor
	})
	if got := f.meter.Snapshot().Gets() - gets; got != 0 {
		t.Fatalf("%d gets before the floor", got)
	}
	// Puts that arrive meanwhile ride along with the first.
	f.put(4)
	n.Notify("work")
	f.clock.Advance(floor)
	eventually(t, "all five are handled", func() bool { return rec.distinct() == 5 })
	if got := f.meter.Snapshot().Calls[meter.Get]; got != 1 {
		t.Fatalf("%d gets found messages, want the five in one", got)
	}
}
