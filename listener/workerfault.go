package listener

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
)

// holdEnd says how runHandler's hold of a message through worker faults
// ended, when its result is not the handler's verdict.
type holdEnd int

const (
	holdNone     holdEnd = iota // the result is the handler's verdict
	holdHandBack                // shutdown or ctx ended: hand the message back (workerFault)
	holdLapsed                  // its lease ended during the pause (renewals failed): drop it
	holdExpired                 // its time-to-live ended during the pause
)

// runHandler runs message i's handler and, while it fails for want of the
// worker's own resources (handler.IsWorkerFault: too many open files, no
// memory, no process), runs it again here once the pause each such failure
// starts has ended (see pauseGets). The message stays held, its lease
// renewed as for a slow handler, so a worker fault raises no dequeue count:
// only a delivery that ends without a verdict does, as a crash's would.
// That is what keeps poisoning honest across a restart, when this
// listener's memory of the faults is gone (see Options.Poison). A fault
// while shutting down, or with ctx ended (a lost lease, an abort), is
// returned with holdHandBack: the caller hands the message back
// (workerFault). A message whose lease or time-to-live ended during the
// pause is not run again (holdLapsed, holdExpired): another consumer may
// hold it by now, or the queue no longer has it. With any end but
// holdNone, the failure is already in the stats and the log. *start, the
// handler's start for its duration average, moves to the retry's.
func (b *batch) runHandler(ctx context.Context, i int, start *time.Time) (err error, end holdEnd) {
	// The common case, in a frame small enough to cost nothing more than
	// the call: the handler's verdict.
	if err = b.l.h(ctx, b.msgs[i]); err == nil || !handler.IsWorkerFault(err) {
		return err, holdNone
	}
	return b.holdThroughFaults(ctx, i, start, err)
}

// holdThroughFaults is runHandler after its handler's first worker fault,
// err.
func (b *batch) holdThroughFaults(ctx context.Context, i int, start *time.Time, err error) (error, holdEnd) {
	l := b.l
	m := b.msgs[i]
	for {
		if err == nil || !handler.IsWorkerFault(err) || l.draining.Load() || ctx.Err() != nil {
			return err, holdNone
		}
		// Held through the pause: if its transaction deleted it and
		// rolled back, renewal must extend it again (settle.go).
		b.unsettleTx(i)
		l.stats.failed.Add(1)
		l.stats.workerFaults.Add(1)
		pause := l.pauseGets()
		if ce := l.log.Check(zap.WarnLevel, "listener: handler failed for want of the worker's own resources; the message runs again here when the pause ends, and does not count towards its poisoning"); ce != nil && l.failLog.allow() {
			fields := append(failureFields(m, queue.RedactError(err), 0), zap.Duration("pause", pause))
			ce.Write(fields...)
		}
		if !b.waitFaultPause(ctx) {
			return queue.RedactError(err), holdHandBack
		}
		if l.isExpired(m) {
			return queue.RedactError(err), holdExpired
		}
		if !b.leaseHeld(i) {
			return queue.RedactError(err), holdLapsed
		}
		*start = time.Now()
		err = l.h(ctx, m)
	}
}

// leaseHeld reports whether message i's lease, by its newest renewal, has
// not ended by the listener's clock.
func (b *batch) leaseHeld(i int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	var end time.Time
	if b.leases != nil {
		end = b.leases[i]
	}
	if end.IsZero() {
		end = b.got.Add(b.l.o.VisibilityTimeout)
	}
	return b.l.o.Clock.Now().Before(end)
}

// holdLapsed settles a message held through worker faults whose lease
// ended during the pause (its renewals failed): another consumer may run
// it now, so it is not run again here, nor handed back. It reappears, or
// has reappeared, with its dequeue count raised by this worker's fault,
// which is excused here.
func (b *batch) holdLapsed(i int, err error) {
	l := b.l
	m := b.msgs[i]
	l.failures.excuse(m.ID)
	l.stats.leasesLost.Add(1)
	l.log.Warn("listener: the lease of a message held for a worker fault ended during the pause; it is not run again here",
		zap.String("msg_id", m.ID), zap.Error(err))
}

// holdExpired settles a message held through worker faults whose
// time-to-live ended during the pause: as for a message that expired
// while its handler ran, it is poisoned rather than lost, if there is a
// poison queue.
func (b *batch) holdExpired(i int, err error) {
	l := b.l
	m := b.msgs[i]
	const why = "the message expired while held for the worker's own lack of resources: poisoned rather than lost"
	if l.o.Poison != nil && b.poison(i, "the message expired while held for a worker fault", &expiringError{err: err, why: why}) {
		return
	}
	l.failures.forget(m.ID)
	l.log.Warn("listener: a message held for a worker fault expired during the pause; it is not run again",
		zap.String("msg_id", m.ID), zap.Error(err))
}

// waitFaultPause waits, for a runner whose handler failed for want of the
// worker's resources, until the pause in force ends. It reports false if
// shutdown began or ctx ended first. Meanwhile the message counts as held
// (see Listener.held): it waits for the clock, not for its handler.
func (b *batch) waitFaultPause(ctx context.Context) bool {
	l := b.l
	done, leave := l.joinPause(b.hold, b.unhold)
	defer leave()
	if done == nil {
		return !l.draining.Load() && ctx.Err() == nil
	}
	l.mu.Lock()
	run := l.runCtx
	l.mu.Unlock()
	select {
	case <-done:
		return !l.draining.Load() && ctx.Err() == nil
	case <-ctx.Done():
		return false
	case <-run.Done():
		return false
	}
}

// hold counts one of the batch's messages as held for a worker fault's
// pause; unhold uncounts it.
func (b *batch) hold() {
	b.l.held.Add(1)
	if b.held.Add(1) == 1 {
		b.l.heldBatches.Add(1)
	}
}

func (b *batch) unhold() {
	b.l.held.Add(-1)
	if b.held.Add(-1) == 0 {
		b.l.heldBatches.Add(-1)
	}
}

// workerFault settles a message whose handler failed for want of the
// worker's own resources when it cannot run again here (runHandler): the
// listener is shutting down, or the handler's context ended. The message
// is not at fault, so the failure does not count towards its poisoning
// here, and it is handed back at once for another worker; the gets pause.
// counted says runHandler already counted and logged the failure.
func (b *batch) workerFault(i int, err error, counted bool) {
	l := b.l
	m := b.msgs[i]
	l.failures.excuse(m.ID)
	pause := l.pauseGets()
	if !counted {
		l.stats.workerFaults.Add(1)
		if ce := l.log.Check(zap.WarnLevel, "listener: handler failed for want of the worker's own resources; the message is handed back, and does not count towards its poisoning"); ce != nil && l.failLog.allow() {
			ce.Write(append(failureFields(m, err, 0), zap.Duration("pause", pause))...)
		}
	}
	l.release(m.ID, b.newestReceipt(i))
}

// pause is the gets' pause after a worker fault (see pauseGets). It is
// measured by a timer of the listener's clock, never by comparing wall
// times, so that setting the clock back or forward (an operator, NTP)
// neither stretches nor ends it: Go's timers run on the monotonic clock.
type pause struct {
	mu     sync.Mutex                    // guards length and streak, and serialises changes to end
	end    atomic.Pointer[chan struct{}] // closed when the pause in force ends; nil: none in force
	length time.Duration                 // the pause in force
	streak int                           // pauses since the last success
	faults atomic.Bool                   // streak is not 0
	// waiters wait for the pause in force (see joinPause); its timer's
	// callback uncounts them before it ends the pause.
	waiters []*pauseWaiter
	timer   clock.Timer // ends the pause in force; nil when none is
}

// pauseWaiter is a task or runner waiting for the pause in force, counted
// (as parked, or as held) until the pause ends or it stops waiting.
type pauseWaiter struct {
	gone atomic.Bool
	out  func()
}

func (w *pauseWaiter) leave() {
	if w.gone.CompareAndSwap(false, true) {
		w.out()
	}
}

// joinPause returns the end of the pause in force and counts the caller
// waiting for it: in() now, and out() when the pause ends (on the clock's
// goroutine, before the end is closed, so that a test in virtual time
// never sees a woken waiter as still waiting) or the caller calls leave,
// whichever is first. With no pause in force it returns nil and counts
// nothing.
func (l *Listener) joinPause(in, out func()) (end <-chan struct{}, leave func()) {
	p := &l.pause
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.end.Load()
	if d == nil {
		return nil, func() {}
	}
	w := &pauseWaiter{out: out}
	in()
	p.waiters = append(p.waiters, w)
	return *d, w.leave
}

// pauseGets makes the tasks fetch nothing for a while: ErrorBackoffInitial
// after the first worker fault, doubling with each later one (up to
// ErrorBackoffMax) until a handler succeeds again. Faults of messages got
// before the pause began (a batch failing together) do not lengthen it. It
// returns the pause in force.
func (l *Listener) pauseGets() time.Duration {
	p := &l.pause
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end.Load() != nil {
		return p.length
	}
	p.streak = min(p.streak+1, 30)
	p.faults.Store(true)
	p.length = min(l.o.ErrorBackoffInitial<<(p.streak-1), l.o.ErrorBackoffMax)
	done := make(chan struct{})
	p.end.Store(&done)
	var t clock.Timer
	t = l.o.Clock.AfterFunc(p.length, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.timer == t {
			p.finishLocked()
		}
	})
	p.timer = t
	return p.length
}

// finishLocked ends the pause in force: its waiters are uncounted, then
// woken. p.mu is held.
func (p *pause) finishLocked() {
	d := p.end.Load()
	if d == nil {
		return
	}
	p.end.Store(nil)
	p.timer = nil
	for _, w := range p.waiters {
		w.leave()
	}
	p.waiters = nil
	close(*d)
}

// endPause ends the pause in force and stops its timer: Wait calls it, so
// that no timer outlives the run and a new run does not inherit the old
// one's pause.
func (l *Listener) endPause() {
	p := &l.pause
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.timer != nil {
		p.timer.Stop()
	}
	p.finishLocked()
}

// faultsOver resets the pauses' doubling: a handler succeeded.
func (l *Listener) faultsOver() {
	p := &l.pause
	if !p.faults.Load() {
		return
	}
	p.mu.Lock()
	p.streak = 0
	p.faults.Store(false)
	p.mu.Unlock()
}

// waitPause waits for the pause that ends with done, as sleep does for a
// duration: it returns early when ctx ends or Resize asks the task to stop.
func (l *Listener) waitPause(ctx context.Context, done <-chan struct{}) sleepReason {
	for {
		resize := l.resizeChan()
		select {
		case <-done:
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
