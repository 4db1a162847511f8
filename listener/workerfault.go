package listener

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
)

// runHandler runs message m's handler and, while it fails for want of the
// worker's own resources (handler.IsWorkerFault: too many open files, no
// memory, no process), runs it again here once the pause each such failure
// starts has ended (see pauseGets). The message stays held, its lease
// renewed as for a slow handler, so a worker fault raises no dequeue count:
// only a delivery that ends without a verdict does, as a crash's would.
// That is what keeps poisoning honest across a restart, when this
// listener's memory of the faults is gone (see Options.Poison). A fault
// while shutting down, or with ctx ended (a lost lease, an abort), is
// returned: the caller hands the message back (workerFault); counted
// says this failure is already in the stats and the log. *start, the
// handler's start for its duration average, moves to the retry's.
func (b *batch) runHandler(ctx context.Context, m *queue.Message, start *time.Time) (err error, counted bool) {
	l := b.l
	for {
		err = l.h(ctx, m)
		if err == nil || !handler.IsWorkerFault(err) || l.draining.Load() || ctx.Err() != nil {
			return err, false
		}
		l.stats.failed.Add(1)
		l.stats.workerFaults.Add(1)
		pause := l.pauseGets()
		if ce := l.log.Check(zap.WarnLevel, "listener: handler failed for want of the worker's own resources; the message runs again here when the pause ends, and does not count towards its poisoning"); ce != nil && l.failLog.allow() {
			fields := append(failureFields(m, queue.RedactError(err), 0), zap.Duration("pause", pause))
			ce.Write(fields...)
		}
		if !b.waitFaultPause(ctx) {
			return queue.RedactError(err), true
		}
		*start = time.Now()
	}
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
	l.o.Clock.AfterFunc(p.length, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.end.CompareAndSwap(&done, nil)
		for _, w := range p.waiters {
			w.leave()
		}
		p.waiters = nil
		close(done)
	})
	return p.length
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
