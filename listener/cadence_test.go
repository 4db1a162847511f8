package listener_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/scaling"
)

// billed makes a driver report billed calls, as Azure's does.
type billed struct{ driver.Queue }

func (b billed) Features() driver.Features {
	f := b.Queue.Features()
	f.Billed = true
	return f
}

func asBilled(d driver.Queue) driver.Queue { return billed{d} }

// The latency target's default comes from the backend, and the cadence
// (half of it) fills idle.min and idle.delta where they are left unset.
func TestLatencyTargetDefaultsFromTheBackend(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name          string
		wrap          func(driver.Queue) driver.Queue
		o             listener.Options
		target        time.Duration
		min, delta, m time.Duration
	}{
		{"free", nil, listener.Options{}, 10 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond, scaling.DefaultMaxIdle},
		// Cost-first: exactly the pre-target defaults.
		{"billed", asBilled, listener.Options{}, 200 * time.Millisecond, scaling.DefaultMinIdle, scaling.DefaultIdleDelta, scaling.DefaultMaxIdle},
		{"free, target set", nil, listener.Options{LatencyTarget: 50 * time.Millisecond}, 50 * time.Millisecond, 25 * time.Millisecond, 25 * time.Millisecond, scaling.DefaultMaxIdle},
		{"billed, idle set", asBilled, listener.Options{Idle: scaling.IdleBackoff{Min: time.Second, Delta: 2 * time.Second, Max: time.Hour}, SafetyInterval: time.Hour},
			200 * time.Millisecond, time.Second, 2 * time.Second, time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixtureWith(t, noop, c.o, c.wrap)
			o := f.l.Options()
			if o.LatencyTarget != c.target || o.Idle.Min != c.min || o.Idle.Delta != c.delta || o.Idle.Max != c.m {
				t.Errorf("target %s, idle %+v; want %s, {Min:%s Max:%s Delta:%s}", o.LatencyTarget, o.Idle, c.target, c.min, c.m, c.delta)
			}
		})
	}
	if _, err := listener.New(mustQueue(t), noop, listener.Options{LatencyTarget: -time.Second}); err == nil {
		t.Error("a negative latency target was accepted")
	}
}

func mustQueue(t *testing.T) *queue.Queue {
	f := newFixture(t, noop, listener.Options{})
	return f.q
}

// steadyResult is what a steady arrival rate cost and how long it waited.
type steadyResult struct {
	msgs       int
	gets, empt int64 // gets (all of them) and empty ones
	deletes    int64 // delete calls (batches count once)
	lat        []time.Duration
}

func (r steadyResult) getsPerSecond(d time.Duration) float64 { return float64(r.gets) / d.Seconds() }

// callsPerMessage counts the put of each message too.
func (r steadyResult) callsPerMessage() float64 {
	return 1 + float64(r.gets+r.deletes)/float64(r.msgs)
}

func (r steadyResult) pct(p int) time.Duration {
	s := slices.Clone(r.lat)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i, 1)-1]
}

// steady puts messages at rate for d of virtual time, one every 1/rate,
// notifying if trigger, and lets the listener run between arrivals until
// every task sleeps. It returns the calls and the pickup latencies (put →
// handler start), measured after a warm-up second.
func steady(t *testing.T, o listener.Options, wrap func(driver.Queue) driver.Queue, rate int, d time.Duration, trigger bool) steadyResult {
	t.Helper()
	var n listener.LocalNotifier
	if trigger {
		o.Notifier = &n
	}
	var mu sync.Mutex
	var lat []time.Duration
	var f *fixture
	h := func(_ context.Context, m *queue.Message) error {
		mu.Lock()
		lat = append(lat, f.clock.Now().Sub(m.InsertedAt))
		mu.Unlock()
		return nil
	}
	f = newFixtureWith(t, h, o, wrap)
	f.start()
	f.settle()
	// One step a millisecond at most, with the messages due in it.
	step, per := time.Second/time.Duration(rate), 1
	if step < time.Millisecond {
		per = int(time.Millisecond / step)
		step = time.Millisecond
	}
	// quiet waits until every task sleeps on its own timer and nothing else
	// is pending (a batch's flush timer ends with the batch), and the state
	// holds still for a moment: only then may the clock move.
	type still struct {
		calls    int64
		deadline string
	}
	look := func() (still, bool) {
		s, _ := f.l.State(context.Background())
		active := s.ActiveTasks
		ok := s.InFlight == 0 && s.IdleTasks+f.l.PacingTasks() == active && f.clock.Pending() == active
		m := f.meter.Snapshot() // State's depth reads are calls too: not counted
		return still{m.Total() - m.Calls[meter.Count], fmt.Sprint(f.clock.Deadlines())}, ok
	}
	quiet := func() {
		eventually(t, "every task sleeps", func() bool {
			a, ok := look()
			if !ok {
				return false
			}
			time.Sleep(100 * time.Microsecond)
			b, ok := look()
			return ok && a == b
		})
	}
	run := func(span time.Duration) {
		for end := f.clock.Now().Add(span); f.clock.Now().Before(end); {
			f.put(per)
			if trigger {
				n.Notify("work")
				quiet() // the wake has been taken
			}
			f.clock.Advance(step)
			quiet()
		}
	}
	run(500 * time.Millisecond) // warm-up
	mu.Lock()
	lat = nil
	mu.Unlock()
	before := f.meter.Snapshot()
	run(d)
	s := f.meter.Snapshot().Sub(before)
	mu.Lock()
	defer mu.Unlock()
	return steadyResult{
		msgs: int(d/step) * per, gets: s.Gets(), empt: s.Calls[meter.GetEmpty],
		deletes: s.Calls[meter.Delete] + s.Calls[meter.DeleteBatch], lat: slices.Clone(lat),
	}
}

// At a steady rate a task gets once per cadence (half the target): a get
// that finds the queue drained is followed by a wait, not by an empty get.
// The pickup latency stays within the target, and at 2,000 msgs/s on a
// backend that deletes in batches a message costs ≤ 1.2 calls, its put
// included.
func TestCadenceAtASteadyRate(t *testing.T) {
	t.Parallel()
	const d = time.Second
	for _, c := range []struct {
		name       string
		wrap       func(driver.Queue) driver.Queue
		rate       int
		trigger    bool
		getsPerSec float64 // the cadence's: one get per target/2
		maxP99     time.Duration
		maxCalls   float64
	}{
		{"free 2000/s trigger", nil, 2000, true, 200, 10 * time.Millisecond, 1.2},
		{"free 2000/s polling", nil, 2000, false, 200, 10 * time.Millisecond, 1.2},
		{"free 200/s trigger", nil, 200, true, 200, 10 * time.Millisecond, 0},
		{"free 200/s polling", nil, 200, false, 200, 15 * time.Millisecond, 0},
		{"billed 50/s trigger", asBilled, 50, true, 10, 100 * time.Millisecond, 0},
		{"billed 200/s trigger", asBilled, 200, true, 10, 100 * time.Millisecond, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := steady(t, listener.Options{}, c.wrap, c.rate, d, c.trigger)
			gps := r.getsPerSecond(d)
			t.Logf("%d msgs: %.1f gets/s (%d empty), %.3f calls/msg, p50 %s p99 %s",
				r.msgs, gps, r.empt, r.callsPerMessage(), r.pct(50), r.pct(99))
			if gps > c.getsPerSec*1.1 {
				t.Errorf("%.1f gets a second, want about %.0f (one per cadence)", gps, c.getsPerSec)
			}
			if p99 := r.pct(99); p99 > c.maxP99 {
				t.Errorf("p99 pickup %s, want ≤ %s", p99, c.maxP99)
			}
			if c.maxCalls > 0 && r.callsPerMessage() > c.maxCalls {
				t.Errorf("%.3f calls per message, want ≤ %.2f", r.callsPerMessage(), c.maxCalls)
			}
		})
	}
}

// After a trigger wakes a task, it gets no sooner than the cadence after
// its last empty get: 5 ms with the free default, 100 ms with the billed.
func TestTriggerFloorIsTheCadence(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		wrap  func(driver.Queue) driver.Queue
		o     listener.Options
		floor time.Duration
	}{
		{"free", nil, listener.Options{}, 5 * time.Millisecond},
		{"billed", asBilled, listener.Options{}, 100 * time.Millisecond},
		{"target 40ms", nil, listener.Options{LatencyTarget: 40 * time.Millisecond}, 20 * time.Millisecond},
		// A long idle.min polls rarely, but never slows triggered work.
		{"idle.min 1s", nil, listener.Options{Idle: scaling.IdleBackoff{Min: time.Second}}, 5 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var n listener.LocalNotifier
			rec := newRecorder()
			c.o.Notifier = &n
			f := newFixtureWith(t, rec.handle, c.o, c.wrap)
			f.start()
			f.settle()
			emptyAt := f.clock.Now()
			f.put(1)
			n.Notify("work")
			eventually(t, "the woken task waits out the floor", func() bool {
				ds := f.clock.Deadlines()
				return len(ds) == 1 && ds[0] == c.floor
			})
			f.clock.AdvanceToNext()
			eventually(t, "the message is handled", func() bool { return rec.distinct() == 1 })
			if got := f.clock.Now().Sub(emptyAt); got != c.floor {
				t.Errorf("handled %s after the empty get, want the floor %s", got, c.floor)
			}
		})
	}
}
