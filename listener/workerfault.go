package listener

import (
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

// pauseGets makes the tasks fetch nothing for a while: ErrorBackoffInitial
// after the first worker fault, doubling with each later one (up to
// ErrorBackoffMax) until a handler succeeds again. Faults of messages got
// before the pause began (a batch failing together) do not lengthen it. It
// returns the pause in force.
func (l *Listener) pauseGets() time.Duration {
	now := l.o.Clock.Now()
	for {
		until := l.pauseUntil.Load()
		if until > now.UnixNano() {
			return time.Duration(until - now.UnixNano())
		}
		n := min(l.faultStreak.Add(1), 30)
		d := min(l.o.ErrorBackoffInitial<<(n-1), l.o.ErrorBackoffMax)
		if l.pauseUntil.CompareAndSwap(until, now.Add(d).UnixNano()) {
			return d
		}
	}
}

// paused is how long the tasks must still wait before they get again
// (see pauseGets).
func (l *Listener) paused() time.Duration {
	until := l.pauseUntil.Load()
	if until == 0 {
		return 0
	}
	return time.Duration(until - l.o.Clock.Now().UnixNano())
}
