package listener

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/scaling"
)

// MinRetryHide is the shortest a failed message is hidden to run again
// before it expires. A retry delay (or visibility timeout) that would end
// too close to the expiry is cut to fit (see hideLimit), but never below
// this: a message with too little left for it is poisoned
// (poison.RuleExpiring) or, with no poison queue, left to expire, instead
// of being retried again and again at intervals shrinking by a third as
// its expiry nears. A second is the least the listener waits before it
// retries anything else that failed (a failed get backs off from
// DefaultErrorBackoffInitial, Azure's storage SDK's first retry); a
// shorter hide retries a downstream that has just failed in a tight loop.
const MinRetryHide = time.Second

// fate is what becomes of a failed message that stays in its queue.
type fate int

const (
	// runsAgain: it is hidden for its retry delay, or reappears when its
	// visibility timeout ends, well before it expires.
	runsAgain fate = iota
	// runsSooner: its retry delay (or its visibility timeout) would end too
	// close to its expiry, so it is hidden for less, to run again first.
	runsSooner
	// expired: it expired while its handler ran; it will not run again.
	expired
	// tooLate: it expires too soon for a retry hidden at least
	// MinRetryHide to be got before it; it will not run again.
	tooLate
)

// retry is the plan for a failed message that stays in its queue.
type retry struct {
	fate fate
	// delay is how long the message is hidden from now, if hide (0:
	// released at once); wanted is the retry delay RetryDelay asked for.
	delay, wanted time.Duration
	hide          bool
	// poison: the message cannot be retried as asked before it expires (a
	// server's Retry-After outlasts it, too little is left for a retry of
	// at least MinRetryHide, or it has expired): it belongs in the poison
	// queue, with why, rather than lost.
	poison bool
	// reason is the poisoning's reason in short, why the whole of it.
	reason, why string
	left        time.Duration // time to the message's expiry (0: it never expires)
}

// planRetry decides how long a failed message that stays in its queue is
// hidden: its retry delay want (0: until the visibility timeout it was got
// with ends), unless that would end too close to its expiry for a get to
// find it again (see hideLimit). Then the hide is cut to the limit; where
// the limit is below MinRetryHide (no meaningful retry is left), where
// the delay was a server's hint (queue.RetryAfter: an http: handler's
// Retry-After) that cannot be honoured, or where the message has expired
// already, the plan says to poison it. The message's expiry is judged with
// the listener's clock.
func (l *Listener) planRetry(m *queue.Message, err error, want time.Duration) retry {
	r := retry{fate: runsAgain, delay: want, wanted: want, hide: want > 0}
	if m.ExpiresAt.IsZero() {
		return r // it never expires
	}
	r.left = m.ExpiresAt.Sub(l.o.Clock.Now())
	if r.left <= 0 {
		r.fate, r.hide, r.poison = expired, false, true
		r.reason = "the message expired while its handler ran"
		r.why = fmt.Sprintf("the message expired %s ago, while its handler ran: poisoned rather than lost", (-r.left).Round(time.Millisecond))
		return r
	}
	limit := hideLimit(r.left, l.longestSleep(), l.firstLook())
	end := want
	if want == 0 {
		// It reappears when the visibility timeout it was got (or last
		// renewed) with ends: at most this long from now.
		end = l.o.VisibilityTimeout
	}
	if end <= limit {
		return r
	}
	r.poison = true
	hint, hinted := queue.RetryAfter(err)
	switch {
	case hinted && want >= hint && want > limit:
		r.reason = "the retry delay outlasts the message's time-to-live"
		r.why = fmt.Sprintf("the server asked to retry after %s (Retry-After), but the message expires in %s: poisoned rather than lost",
			want, r.left.Round(time.Millisecond))
	case limit < MinRetryHide:
		r.reason = "the message expires too soon to be retried"
		r.why = fmt.Sprintf("the message expires in %s, too soon for a retry (one waits at least %s and must be got before the expiry): poisoned rather than lost",
			r.left.Round(time.Millisecond), MinRetryHide)
	default:
		r.poison = false
	}
	if limit < MinRetryHide {
		// Not poisoned (no poison queue, or the put failed): hidden for
		// the rest of its life, so that it does not run again in a
		// shrinking series of ever shorter hides.
		r.fate, r.delay, r.hide = tooLate, r.left, true
		return r
	}
	r.fate, r.delay, r.hide = runsSooner, limit, true
	return r
}

// hideLimit is the longest a failed message with left to live may be
// hidden and still be got again before it expires: a hide of d must end
// at least min(longest, 2d + first) before the expiry. longest is the
// listener's longest idle sleep, the most a get may wait once the message
// is visible again. The task that failed it looks again within first (a
// cadence after its partial get, then its first idle sleep), and backs off
// from there exponentially (Best Practices' idle backoff: each sleep about
// the time idle so far, times up to 1.2), so it is asleep for at most
// about first + 1.2·d when a hide of d ends, and 2d + first leaves room.
// That is max(left − longest, (left − first)/3), and 0 once nothing is
// left.
func hideLimit(left, longest, first time.Duration) time.Duration {
	return max(left-longest, (left-first)/3, 0)
}

// firstLook is the most the task that failed a message takes to get
// again: the cadence it waits after a partial get, and then the longest
// first sleep of the default QueueEmpty rule (idle.min + 1.2·idle.delta,
// at most idle.max).
func (l *Listener) firstLook() time.Duration {
	return l.cadence() + l.o.Idle.DelayWith(1, scaling.JitterMax)
}

// longestSleep is the longest an idle task of the default QueueEmpty rule
// sleeps: idle.max, or the safety interval with a trigger.
func (l *Listener) longestSleep() time.Duration {
	if l.o.Notifier != nil {
		return max(l.o.SafetyInterval, l.o.Idle.Max)
	}
	return l.o.Idle.Max
}

// expiringError is the error of a message poisoned because it could not
// be retried before it expired: the handler's error, and why.
type expiringError struct {
	err error
	why string
}

func (e *expiringError) Error() string { return e.err.Error() + "; " + e.why }
func (e *expiringError) Unwrap() error { return e.err }

// retryLater settles a failed message that stays in its queue, by the
// plan of planRetry: poison it if it cannot be retried before it expires
// (and there is a poison queue), or log the failure and hide the message
// for its delay.
func (b *batch) retryLater(i int, err error) {
	l := b.l
	m := b.msgs[i]
	r := l.planRetry(m, err, min(l.o.RetryDelay(m, err), queue.MaxVisibilityTimeout))
	if r.poison && l.o.Poison != nil {
		if b.poison(i, r.reason, &expiringError{err: err, why: r.why}) {
			return
		}
	}
	l.logFailure(m, err, r)
	b.traceRequeued(i, r.delay, r.hide)
	if !r.hide {
		return
	}
	_, uerr := l.q.UpdateVisibility(l.opCtx, m.ID, b.newestReceipt(i), r.delay)
	switch {
	case uerr == nil && r.delay > 0:
		l.stats.hidden.Add(1)
	case uerr == nil:
		l.stats.released.Add(1)
	default:
		l.log.Debug("listener: hiding a failed message failed", zap.String("msg_id", m.ID), zap.Error(uerr))
	}
}

// isExpired reports whether m's time-to-live has ended, by the listener's
// clock.
func (l *Listener) isExpired(m *queue.Message) bool {
	return !m.ExpiresAt.IsZero() && !l.o.Clock.Now().Before(m.ExpiresAt)
}

// errExpiring reports whether err is a message's poisoning for its expiry.
func errExpiring(err error) bool {
	_, ok := errors.AsType[*expiringError](err)
	return ok
}
