package listener

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/adaptq/adaptq/queue"
)

// task is one dequeue task: the Best Practices article's DequeueTaskMain.
// Its loop usually runs on one goroutine, but an inline batch that stalls
// hands the loop to a new goroutine (see batch.spill), so the task's state
// lives here rather than on a stack.
type task struct {
	l   *Listener
	id  int
	ctx context.Context
	log *zap.Logger
	// inFlight counts this task's fetched messages not yet finished; wake
	// receives when it falls to the new-batch threshold.
	inFlight atomic.Int32
	wake     chan struct{}
	// idle counts empty gets in a row; errBackoff paces retries of failed
	// gets. Only the goroutine running the loop touches them.
	idle       int
	errBackoff *backoff.ExponentialBackOff
	// longPoll is the wait of the next get where the backend long-polls
	// (Features().LongPoll): an idle task's sleep, spent on the server.
	// polled and pollStart are the last get's wait (0: not a long poll)
	// and when it began.
	longPoll  time.Duration
	polled    time.Duration
	pollStart time.Time
	// nextGet, if set, is when the next get may go after a partial one
	// (see gotPartial).
	nextGet time.Time
	// hctx is the handler context and watchdog the task lends its inline
	// batches, reused while neither is spent; only the goroutine running
	// the loop touches them (see dispatch).
	hctx     *runnerCtx
	hcancel  context.CancelFunc
	watchdog *watchdog
	// spare is the task's last inline batch, kept for its next (see
	// batch.keep); only the goroutine running the loop touches it.
	spare *batch
}

func (l *Listener) taskMain(ctx context.Context, id int) error {
	t := &task{l: l, id: id, ctx: ctx, log: l.log.With(zap.Int("task", id)), wake: make(chan struct{}, 1)}
	return t.loop()
}

// loop gets → dispatches, or gets → asks QueueEmpty → sleeps, until the
// run's context ends, the QueueEmpty hook stops the task, Resize asks for
// fewer tasks, or the loop is handed to another goroutine.
func (t *task) loop() error {
	l, ctx, log := t.l, t.ctx, t.log
	// counted: this goroutine still owns the task's place in l.active (a
	// stop by resize or by the idle rule gave it up already). handedOff:
	// the loop went on in another goroutine, which now owns the task and
	// whatever the task lends its inline batches. Every other way out
	// ends what the task lends: its handler context would otherwise stay
	// registered under the run's abort context until Wait.
	counted, handedOff := true, false
	defer func() {
		if handedOff {
			return
		}
		if counted {
			l.taskEnded()
		}
		t.endInline()
	}()
	for {
		if ctx.Err() != nil {
			return nil
		}
		if l.takeStopToken() {
			counted = false
			log.Debug("listener: task stopped by resize")
			return nil
		}
		// Fetch again only when few enough of this task's messages remain
		// (Functions' NewBatchThreshold), so a slow message holds back
		// nothing but itself.
		if !t.waitBelow(ctx, l.o.NewBatchThreshold) {
			return nil
		}
		switch t.pace(ctx) {
		case sleepStop:
			counted = false
			return nil
		case sleepCancelled:
			return nil
		}
		// joinPause only with a pause in force: its method-value arguments
		// would cost an allocation per get.
		if l.pause.end.Load() != nil {
			if done, leave := l.joinPause(l.park1, l.unpark1); done != nil {
				// A handler failed for want of the worker's resources: get
				// nothing until the pause ends (see pauseGets). The task is
				// idle meanwhile, and parked on the pause's timer.
				l.idleTasks.Add(1)
				r := l.waitPause(ctx, done)
				leave()
				l.idleTasks.Add(-1)
				switch r {
				case sleepStop:
					counted = false
					return nil
				case sleepCancelled:
					return nil
				}
			}
		}
		held, r := l.admit(ctx)
		switch r {
		case sleepStop:
			counted = false
			return nil
		case sleepCancelled:
			return nil
		}
		// The get itself is not cancelled by shutdown: a get cut off midway
		// may have hidden messages on the backend that it never returns,
		// which nobody would then hold until their visibility timeout.
		// Whatever it brings back after shutdown began is released below.
		// A trigger from now on wakes the sleep after an empty get: a
		// producer's put that this get missed comes with a Wake that
		// lands before the task sleeps.
		wake := l.wakeChan()
		var ms []*queue.Message
		var err error
		if wait := t.longPoll; wait > 0 {
			// An idle task's long poll: it returns the moment a message
			// arrives. Shutdown cuts it off; what it may have hidden on the
			// way reappears after its visibility timeout.
			t.longPoll = 0
			t.polled, t.pollStart = wait, l.o.Clock.Now()
			l.idleTasks.Add(1)
			ms, err = l.q.GetWait(ctx, held, l.o.VisibilityTimeout, wait)
			l.idleTasks.Add(-1)
		} else {
			t.polled = 0
			ms, err = l.q.Get(l.opCtx, held, l.o.VisibilityTimeout)
		}
		l.admitted(held, len(ms))
		if err != nil {
			l.sem.Release(int64(held))
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, queue.ErrClosed) {
				l.setFatal(err)
				return err
			}
			if t.errBackoff == nil {
				t.errBackoff = l.newErrorBackoff()
			}
			wait := l.getFailed(log, err, t.errBackoff)
			if l.sleep(ctx, wait, wake) == sleepStop {
				counted = false
				return nil
			}
			continue
		}
		// One reading of the clock serves the get's stats, the pickup
		// latencies and the batch's dispatch.
		now := l.o.Clock.Now()
		l.stats.lastGet.Store(now.UnixNano())
		l.stats.lastGetFailed.Store(false)
		if t.errBackoff != nil {
			t.errBackoff.Reset()
		}
		if unused := held - len(ms); unused > 0 {
			l.sem.Release(int64(unused))
		}
		t.gotPartial(held, len(ms))
		if len(ms) == 0 {
			l.stats.emptyGets.Add(1)
			t.idle++
			delay, stop := l.o.QueueEmpty(l, t.idle)
			if stop && l.tryIdleStop() {
				counted = false
				log.Debug("listener: idle task stopped", zap.Int("idle_count", t.idle), zap.Duration("delay", delay))
				return nil
			}
			if lp := l.q.Features().LongPoll; lp >= time.Second && delay >= time.Second {
				// The backend waits instead of the task: the next get
				// long-polls for the idle delay (at most LongPoll), so an
				// idle task makes one call per LongPoll and sees a message
				// the moment it is put, trigger or not.
				if t.polled > 0 {
					// A long poll that came back empty before its wait was
					// up (a backend or a wrapper that did not hold the
					// call) must not make the idle wait a busy loop: sleep
					// the rest.
					if rest := t.polled - l.o.Clock.Now().Sub(t.pollStart); rest > 0 {
						l.idleTasks.Add(1)
						r := l.sleep(ctx, rest, wake)
						l.idleTasks.Add(-1)
						if r == sleepStop {
							counted = false
							return nil
						}
					}
				}
				t.longPoll = min(delay, lp)
				continue
			}
			emptyAt := l.o.Clock.Now()
			l.idleTasks.Add(1)
			r := l.sleep(ctx, delay, wake)
			if r == sleepWoken {
				// A trigger: get again, but no sooner than the trigger floor
				// after the empty get, so that a trickle of triggered puts
				// is fetched in batches rather than one get (and one empty
				// get) per message.
				if floor := emptyAt.Add(l.triggerFloor()).Sub(l.o.Clock.Now()); floor > 0 {
					r = l.sleep(ctx, floor, nil)
				}
			}
			l.idleTasks.Add(-1)
			if r == sleepStop {
				counted = false
				return nil
			}
			continue
		}
		l.countPickups(ms, now)
		if ctx.Err() != nil {
			// Shutdown began while the get was on its way: hand the
			// messages straight back.
			l.releaseAll(ms)
			l.sem.Release(int64(len(ms)))
			return nil
		}
		if l.busyPool.Load() > 1 && len(ms) == held {
			l.growBusy()
		}
		if t.idle > 0 {
			t.idle = 0
			l.stats.workDetected.Add(1)
			log.Debug("listener: work detected", zap.Int("messages", len(ms)))
			if l.o.WorkDetected != nil {
				l.o.WorkDetected(l)
			}
		}
		if l.dispatch(t, ms, now) {
			// A stalled inline batch handed the loop to a new goroutine,
			// which now owns the task.
			handedOff = true
			return nil
		}
	}
}

// endInline cancels the handler context and stops the watchdog the task
// keeps for its inline batches. Only the goroutine that owns the loop
// calls it, as the loop ends.
func (t *task) endInline() {
	if t.hcancel != nil {
		t.hcancel()
	}
	if t.watchdog != nil {
		t.watchdog.timer.Stop()
	}
	t.hctx, t.hcancel, t.watchdog = nil, nil, nil
}

// waitBelow blocks until no more than n of the task's messages are in
// flight; false if ctx ended first.
func (t *task) waitBelow(ctx context.Context, n int) bool {
	for t.inFlight.Load() > int32(n) {
		select {
		case <-t.wake:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// finished is called as the task's messages finish, n at a time; it wakes
// the task when they fall to the new-batch threshold.
func (t *task) finished(n int) {
	thr := int32(t.l.o.NewBatchThreshold)
	if now := t.inFlight.Add(-int32(n)); now <= thr && now+int32(n) > thr {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

func (l *Listener) newErrorBackoff() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(l.o.ErrorBackoffInitial),
		backoff.WithMaxInterval(l.o.ErrorBackoffMax),
		backoff.WithMaxElapsedTime(0),
	)
	b.Clock = l.o.Clock
	b.Reset()
	return b
}

// getFailed counts and logs a failed get and returns how long to wait
// before the next: the backoff's next interval, or the server's hint if
// longer.
func (l *Listener) getFailed(log *zap.Logger, err error, b *backoff.ExponentialBackOff) time.Duration {
	l.stats.getErrors.Add(1)
	l.stats.lastGetErr.Store(&err)
	l.stats.lastGetError.Store(l.o.Clock.Now().UnixNano())
	l.stats.lastGetFailed.Store(true)
	wait := b.NextBackOff()
	if ra, ok := queue.RetryAfter(err); ok && ra > wait {
		wait = ra
	}
	if queue.IsTransient(err) {
		l.stats.transientErrors.Add(1)
		log.Warn("listener: get failed, retrying", zap.Error(err), zap.Duration("delay", wait))
	} else {
		log.Error("listener: get failed, retrying", zap.Error(err), zap.Duration("delay", wait))
	}
	return wait
}

// releaseAll makes unstarted messages visible again at once.
func (l *Listener) releaseAll(ms []*queue.Message) {
	rs := make([]queue.Receipt, len(ms))
	for i, m := range ms {
		rs[i] = queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt}
	}
	// One call per Features().MaxBatch where the backend changes
	// visibilities in batches (SQS), else one each.
	_, res, err := l.q.UpdateVisibilityBatch(l.opCtx, rs, 0)
	for i, m := range ms {
		e := err
		if e == nil {
			e = res[i]
		}
		if e != nil {
			l.log.Debug("listener: release failed; the message reappears after its visibility timeout", zap.String("msg_id", m.ID), zap.Error(e))
			continue
		}
		l.stats.released.Add(1)
	}
}

// release makes one held, unstarted message visible at once, so another
// consumer gets it now rather than after the visibility timeout.
func (l *Listener) release(id, receipt string) {
	if _, err := l.q.UpdateVisibility(l.opCtx, id, receipt, 0); err != nil {
		l.log.Debug("listener: release failed; the message reappears after its visibility timeout", zap.String("msg_id", id), zap.Error(err))
		return
	}
	l.stats.released.Add(1)
}

// countPickups adds the pickup latency of the first deliveries in ms, just
// fetched at now, to the listener's counters (Stats.PickupLatency). It
// subtracts Unix nanoseconds rather than times (Time.Sub's overflow checks
// cost more than the rest of a message's bookkeeping): exact between
// 1678 and 2262.
func (l *Listener) countPickups(ms []*queue.Message, now time.Time) {
	at := now.UnixNano()
	var sum, n int64
	for _, m := range ms {
		if m.DequeueCount != 1 || m.InsertedAt.IsZero() {
			continue
		}
		n++
		if d := at - m.InsertedAt.UnixNano(); d > 0 {
			sum += d
		}
	}
	if n > 0 {
		l.stats.pickupNanos.Add(sum)
		l.stats.pickedUp.Add(n)
	}
}
