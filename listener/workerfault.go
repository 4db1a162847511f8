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
		if !l.waitFaultPause(ctx) {
			return queue.RedactError(err), true
		}
		*start = time.Now()
	}
}

// waitFaultPause waits, for a runner whose handler failed for want of the
// worker's resources, until the pause in force ends. It reports false if
// shutdown began or ctx ended first.
func (l *Listener) waitFaultPause(ctx context.Context) bool {
	done := l.pauseEnd()
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
		close(done)
	})
	return p.length
}

// pauseEnd is closed when the pause in force ends; nil when none is.
func (l *Listener) pauseEnd() <-chan struct{} {
	if d := l.pause.end.Load(); d != nil {
		return *d
	}
	return nil
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
