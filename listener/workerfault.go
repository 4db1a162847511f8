package listener

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// workerFault settles a message whose handler failed for want of the
// worker's own resources (handler.IsWorkerFault: too many open files, no
// memory, no process): the message is not at fault, so the failure does
// not count towards its poisoning here, and it is handed back at once for
// another worker. The listener's tasks pause their gets (see pauseGets), so
// that a starved worker does not take message after message only to hand
// each back with its dequeue count raised.
func (b *batch) workerFault(i int, err error) {
	l := b.l
	m := b.msgs[i]
	l.stats.workerFaults.Add(1)
	l.failures.excuse(m.ID)
	pause := l.pauseGets()
	if ce := l.log.Check(zap.WarnLevel, "listener: handler failed for want of the worker's own resources; the message is handed back, and does not count towards its poisoning"); ce != nil && l.failLog.allow() {
		fields := append(failureFields(m, err, 0), zap.Duration("pause", pause))
		ce.Write(fields...)
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
