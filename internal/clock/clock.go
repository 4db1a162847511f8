// Package clock is the time source adaptq's time-dependent logic takes, so
// that tests and the simulator run in virtual time: a 60 s backoff is tested
// in microseconds. Real is the wall clock; Fake moves only when told.
package clock

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine after d. The Timer's C is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is the part of *time.Timer adaptq uses.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it stopped it.
	Stop() bool
}

// Real is the wall clock.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time                 { return time.Now() }
func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }
func (realClock) AfterFunc(d time.Duration, f func()) Timer {
	return realTimer{time.AfterFunc(d, f)}
}

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }

// Sleep waits for d on c. It returns early with false when ctx ends or wake
// receives, and true when the full d has passed.
func Sleep(ctx context.Context, c Clock, d time.Duration, wake <-chan struct{}) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	case <-wake:
		return false
	}
}

// Fake is a clock that moves only by Advance or Set. Timers fire, in
// deadline order, when the time reaches them. It is safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced when the timer set changes
	// fired are channel timers that fired and may not have been received
	// yet; running counts AfterFunc callbacks started and not returned.
	fired   []*fakeTimer
	running atomic.Int64
}

// Epoch is a readable start for fake clocks: 2026-01-01 00:00 UTC.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// NewFake returns a Fake clock set to start (Epoch if start is zero).
func NewFake(start time.Time) *Fake {
	if start.IsZero() {
		start = Epoch
	}
	return &Fake{now: start, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer makes a timer that fires when the fake time reaches now+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, at: f.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- f.now
		f.fired = append(f.fired, t)
		return t
	}
	f.timers = append(f.timers, t)
	f.notifyLocked()
	return t
}

// AfterFunc calls f in a new goroutine when the fake time reaches now+d.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, at: f.now.Add(d), fn: fn}
	if d <= 0 {
		f.call(fn)
		return t
	}
	f.timers = append(f.timers, t)
	f.notifyLocked()
	return t
}

// Advance moves the time forward by d, firing every timer due on the way,
// each at its own deadline.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	target := f.now.Add(d)
	f.mu.Unlock()
	f.Set(target)
}

// Set moves the time to t (never backwards), firing due timers in order.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		next := f.nextLocked()
		if next == nil || next.at.After(t) {
			break
		}
		if next.at.After(f.now) {
			f.now = next.at
		}
		f.removeLocked(next)
		if next.fn != nil {
			f.call(next.fn)
		} else {
			next.ch <- f.now
			f.fired = append(f.fired, next)
		}
	}
	if t.After(f.now) {
		f.now = t
	}
}

// AdvanceToNext moves the time to the earliest pending timer and fires it
// (and any others due then). It reports false if no timer is pending.
func (f *Fake) AdvanceToNext() bool {
	f.mu.Lock()
	next := f.nextLocked()
	f.mu.Unlock()
	if next == nil {
		return false
	}
	f.Set(next.at)
	return true
}

// call runs an AfterFunc callback in its own goroutine, counted in
// Running until it returns.
func (f *Fake) call(fn func()) {
	f.running.Add(1)
	go func() {
		defer f.running.Add(-1)
		fn()
	}()
}

// Running is the number of AfterFunc callbacks the clock has started that
// have not returned: work a move of the clock set off.
func (f *Fake) Running() int { return int(f.running.Load()) }

// Unreceived is the number of timers that fired whose channel still holds
// the time, not stopped since: goroutines a move of the clock woke that
// have not run yet.
func (f *Fake) Unreceived() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	kept := f.fired[:0]
	for _, t := range f.fired {
		if !t.stopped && len(t.ch) > 0 {
			kept = append(kept, t)
		}
	}
	clear(f.fired[len(kept):])
	f.fired = kept
	return len(kept)
}

// Pending is the number of timers waiting to fire.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// NextDeadline returns the earliest pending timer's deadline.
func (f *Fake) NextDeadline() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := f.nextLocked(); n != nil {
		return n.at, true
	}
	return time.Time{}, false
}

// WaitPending blocks until at least n timers are pending or ctx ends; it
// reports whether the count was reached. Tests use it to know that
// goroutines have gone to sleep before they move the time.
func (f *Fake) WaitPending(ctx context.Context, n int) bool {
	for {
		f.mu.Lock()
		if len(f.timers) >= n {
			f.mu.Unlock()
			return true
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// Deadlines returns the pending timers' deadlines relative to now, sorted.
func (f *Fake) Deadlines() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]time.Duration, len(f.timers))
	for i, t := range f.timers {
		out[i] = t.at.Sub(f.now)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (f *Fake) nextLocked() *fakeTimer {
	var n *fakeTimer
	for _, t := range f.timers {
		if n == nil || t.at.Before(n.at) {
			n = t
		}
	}
	return n
}

func (f *Fake) removeLocked(t *fakeTimer) bool {
	for i, x := range f.timers {
		if x == t {
			f.timers = append(f.timers[:i], f.timers[i+1:]...)
			f.notifyLocked()
			return true
		}
	}
	return false
}

func (f *Fake) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

type fakeTimer struct {
	f       *Fake
	at      time.Time
	ch      chan time.Time
	fn      func()
	stopped bool // guarded by f.mu
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	t.stopped = true
	return t.f.removeLocked(t)
}
