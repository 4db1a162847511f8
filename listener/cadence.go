package listener

import (
	"context"
	"time"
)

// Latency targets: the pickup latency a queue accepts by default, chosen by
// whether the backend bills its calls (driver.Features.Billed).
const (
	// DefaultLatencyTargetBilled is cost-first, for backends that bill
	// every call (Azure Queue storage): a 100 ms cadence, which is today's
	// 100 ms trigger floor and the Best Practices article's 100 ms idle delta (Azure
	// Functions' 100 ms shortest poll), so a trickle of messages is fetched
	// in batches and an idle queue costs 12 calls an hour with a trigger.
	DefaultLatencyTargetBilled = 200 * time.Millisecond
	// DefaultLatencyTargetFree is latency-first, for backends whose calls
	// cost no money (memory, SQLite, PostgreSQL, Redis): work starts within
	// milliseconds, as users of River and asynq expect.
	DefaultLatencyTargetFree = 10 * time.Millisecond
)

// DefaultLatencyTarget is the latency target a queue gets when
// Options.LatencyTarget is 0: cost-first on a billed backend, latency-first
// otherwise.
func DefaultLatencyTarget(billed bool) time.Duration {
	if billed {
		return DefaultLatencyTargetBilled
	}
	return DefaultLatencyTargetFree
}

// fitLatency fills the latency target from the backend and derives from it
// the cadence (LatencyTarget/2) of what the user left unset: idle.min and
// idle.delta. It runs before withDefaults, which would fill those with
// scaling's fixed defaults.
func (o *Options) fitLatency(billed bool) {
	if o.LatencyTarget == 0 {
		o.LatencyTarget = DefaultLatencyTarget(billed)
	}
	if o.LatencyTarget < 0 {
		return // validate names it
	}
	c := max(o.LatencyTarget/2, time.Nanosecond)
	if o.Idle.Min == 0 {
		o.Idle.Min = c
	}
	if o.Idle.Delta == 0 {
		o.Idle.Delta = c
	}
}

// cadence is half the latency target: the least time between two gets of
// a task while work trickles in, so that a message waits at most one
// cadence for the get that fetches it plus one for the gets before it.
func (l *Listener) cadence() time.Duration { return max(l.o.LatencyTarget/2, time.Nanosecond) }

// triggerFloor is the least time between an empty get and a get a trigger
// wakes: idle.min, capped at the cadence so that a long idle.min, set to
// poll rarely, never slows triggered work. With the billed default (a
// 200 ms target) that is min(idle.min, 100 ms), as before latency targets.
func (l *Listener) triggerFloor() time.Duration {
	return min(l.o.Idle.Min, l.cadence())
}

// gotPartial records a get that returned got of the asked messages. One
// that returned some but fewer than asked found the queue momentarily
// drained: the next get waits for the cadence instead of coming back empty
// at once (and then sleeping), so that at a steady rate each get fetches
// what arrived during one cadence.
func (t *task) gotPartial(asked, got int) {
	if got > 0 && got < asked {
		t.nextGet = t.l.o.Clock.Now().Add(t.l.cadence())
	} else {
		t.nextGet = time.Time{}
	}
}

// pace waits, if the last get was partial, until a cadence after it. A
// trigger does not end the wait (the messages it announces are fetched by
// the get after it); shutdown and a resize that stops the task do.
func (t *task) pace(ctx context.Context) sleepReason {
	if t.nextGet.IsZero() {
		return sleptFull
	}
	l := t.l
	d := t.nextGet.Sub(l.o.Clock.Now())
	t.nextGet = time.Time{}
	if d <= 0 {
		return sleptFull
	}
	fired, unpark := l.park(d)
	defer unpark()
	// Counted once the timer exists, so that a test in virtual time that
	// sees the task pacing may move the clock.
	l.pacing.Add(1)
	defer l.pacing.Add(-1)
	for {
		resize := l.resizeChan()
		select {
		case <-fired:
			return sleptFull
		case <-ctx.Done():
			return sleepCancelled
		case <-resize:
			if l.takeStopToken() {
				return sleepStop
			}
		}
	}
}
