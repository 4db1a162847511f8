package listener

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
)

// Dispatch tuning. A handler faster than sequentialBelow on average costs
// less than starting a goroutine for it would, so a batch of them runs
// inline on the task's own goroutine, as a hand-written loop would. An
// inline batch not finished after stallAfter spills its unstarted messages
// onto parallel runners and hands the task's loop to a new goroutine, so
// one slow message holds back neither the rest of its batch nor the
// task's next get.
//
// A batch still unfinished flushAfter after its get deletes the messages
// that did succeed (their receipts would otherwise wait on the slowest
// message), and again every flushAfter while it stays unfinished.
const (
	sequentialBelow = 5 * time.Microsecond
	stallAfter      = time.Millisecond
	flushAfter      = time.Second
)

// Message states within a batch.
const (
	stWaiting   uint32 = iota // fetched, not started
	stRunning                 // handler running
	stSucceeded               // handler returned nil; to be deleted
	stFailed                  // handler failed; left to reappear
	stDone                    // deleted, released, or given up
)

// batch is the messages of one get, handled together. Runners claim
// messages by index; the last message to finish completes the batch, which
// deletes the successes in one call. While a batch is unfinished a
// maintenance timer flushes successes early and extends messages still
// held at half the visibility timeout.
type batch struct {
	l     *Listener
	t     *task
	msgs  []*queue.Message
	state [queue.MaxBatchSize]atomic.Uint32
	next  atomic.Int32 // index of the next message to claim
	left  atomic.Int32 // messages not finished

	// ctx is the inline runner's handler context, cancelled if the lease
	// of the message it runs is lost; parallel runners make one each.
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex           // guards the fields below
	receipts  []string             // newest pop receipts; nil while none has changed
	cancels   []context.CancelFunc // of parallel runners' handlers; nil until one starts
	closed    bool
	inline    bool        // running on the task's goroutine
	handedOff bool        // the task's loop moved to another goroutine
	tick      clock.Timer // the next flush or renewal; nil until armed
	renewAt   time.Time   // when held messages are next extended
}

// receipt is message i's newest pop receipt. b.mu is held.
func (b *batch) receipt(i int) string {
	if b.receipts != nil {
		return b.receipts[i]
	}
	return b.msgs[i].PopReceipt
}

// setReceipt records a new receipt for message i. b.mu is held.
func (b *batch) setReceipt(i int, r string) {
	if b.receipts == nil {
		b.receipts = make([]string, len(b.msgs))
		for j, m := range b.msgs {
			b.receipts[j] = m.PopReceipt
		}
	}
	b.receipts[i] = r
}

// armMaintenance starts the flush-and-renew timer. b.mu is held.
func (b *batch) armMaintenance() {
	if b.tick == nil && !b.closed {
		d := min(flushAfter, b.renewAt.Sub(b.l.o.Clock.Now()))
		b.tick = b.l.o.Clock.AfterFunc(d, b.maintain)
	}
}

// dispatch starts handling a fetched batch. A batch of fast handlers runs
// inline before dispatch returns; otherwise dispatch returns at once. It
// reports whether the task's loop was handed to another goroutine, in
// which case the caller must end.
func (l *Listener) dispatch(t *task, ms []*queue.Message) (handedOff bool) {
	n := len(ms)
	b := &batch{l: l, t: t, msgs: ms}
	b.left.Store(int32(n))
	t.inFlight.Add(int32(n))
	l.inFlight.Add(int64(n))
	l.wg.Add(1) // the batch itself, until complete
	b.renewAt = l.o.Clock.Now().Add(l.o.VisibilityTimeout / 2)
	avg, known := l.ewma.known()
	if l.o.Dispatch == DispatchParallel || !known || avg >= sequentialBelow {
		b.mu.Lock()
		b.armMaintenance()
		for i := 0; i < n; i++ {
			l.wg.Go(func() { b.run(false) })
		}
		b.mu.Unlock()
		return false
	}
	b.inline = true
	b.ctx, b.cancel = t.inlineContext()
	t.current.Store(b)
	t.stall.Reset(stallAfter)
	b.run(true)
	t.stall.Stop()
	t.current.Store(nil)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inline = false
	if b.handedOff {
		b.cancel() // the context stayed with this goroutine; release it
	}
	return b.handedOff
}

// run claims and handles messages until none are left to claim. The
// inline runner settles its counters once at the end; a parallel runner
// settles each message as it finishes.
func (b *batch) run(inline bool) {
	l := b.l
	start := time.Now()
	ran, ok := 0, 0
	for {
		if inline && b.ctx.Err() != nil {
			// The lease of the message it ran was lost: the runners the
			// spill started take the rest.
			break
		}
		i := int(b.next.Add(1)) - 1
		if i >= len(b.msgs) {
			break
		}
		if l.draining.Load() {
			b.releaseUnstarted(i)
			continue
		}
		m := b.msgs[i]
		if l.o.Poison != nil && m.DequeueCount > l.o.MaxDequeueCount {
			// It was fetched this often before and never finished: it
			// crashes its worker. Poison it without running it again.
			b.poison(i, "dequeue count above the maximum before the run", nil)
			b.settle(1, 0)
			continue
		}
		ctx := b.ctx
		var cancel context.CancelFunc
		if !inline {
			ctx, cancel = context.WithCancel(l.handlerCtx)
			b.mu.Lock()
			if b.cancels == nil {
				b.cancels = make([]context.CancelFunc, len(b.msgs))
			}
			b.cancels[i] = cancel
			b.mu.Unlock()
			start = time.Now()
		}
		if !b.state[i].CompareAndSwap(stWaiting, stRunning) {
			// Its lease was lost while it waited: someone else has it.
			b.settle(1, 0)
			continue
		}
		err := l.h(ctx, m)
		if !inline {
			l.ewma.add(time.Since(start))
		}
		ran++
		if cancel != nil {
			cancel()
			b.mu.Lock()
			b.cancels[i] = nil
			b.mu.Unlock()
		}
		if err == nil {
			ok++
			b.state[i].Store(stSucceeded)
		} else {
			b.failed(i, err)
		}
		if !inline {
			b.settle(1, ok)
			ran, ok = 0, 0
		}
	}
	if inline && ran > 0 {
		l.ewma.add(time.Since(start) / time.Duration(ran))
		b.settle(ran, ok)
	}
}

// settle accounts for n finished messages, ok of them succeeded: it frees
// their handler slots, wakes the task at its new-batch threshold, and
// completes the batch when nothing is left.
func (b *batch) settle(n, ok int) {
	l := b.l
	l.sem.Release(int64(n))
	if ok > 0 {
		l.stats.processed.Add(int64(ok))
	}
	l.inFlight.Add(-int64(n))
	b.t.finished(n)
	if b.left.Add(-int32(n)) == 0 {
		b.complete()
	}
}

// spill rescues a stalled inline batch: its unstarted messages go to
// parallel runners, the maintenance timer starts, and the task's loop goes
// on in a new goroutine while this one waits for its handler.
func (b *batch) spill() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || !b.inline || b.handedOff {
		return
	}
	b.handedOff = true
	b.armMaintenance()
	for k := len(b.msgs) - int(b.next.Load()); k > 0; k-- {
		b.l.wg.Go(func() { b.run(false) })
	}
	t := b.t
	// The stalled handler keeps this batch's context; the task's later
	// batches get a new one, so a lease lost here cancels nothing there.
	t.inlineCtx, t.inlineCancel = nil, nil
	b.l.group.Go(t.loop)
}

// failed handles a handler error: count it, log it, and hide the message
// for the retry delay if there is one. The message is not deleted.
func (b *batch) failed(i int, err error) {
	l := b.l
	m := b.msgs[i]
	l.stats.failed.Add(1)
	var pe *handler.PanicError
	if errors.As(err, &pe) {
		l.stats.panics.Add(1)
	}
	if l.o.Poison != nil {
		switch {
		case handler.IsPermanent(err):
			if b.poison(i, "permanent failure", err) {
				return
			}
		case m.DequeueCount >= l.o.MaxDequeueCount:
			if b.poison(i, "failed at the maximum dequeue count", err) {
				return
			}
		}
	}
	if l.draining.Load() && !handler.IsPermanent(err) {
		// Shutting down (the grace period ended, or the handler gave up on
		// its own): hand the message to another worker now rather than
		// after its visibility timeout.
		b.mu.Lock()
		receipt := b.receipt(i)
		b.mu.Unlock()
		l.release(m.ID, receipt)
		b.state[i].Store(stDone)
		return
	}
	delay := l.o.RetryDelay(m, err)
	fields := []zap.Field{zap.String("msg_id", m.ID), zap.Int("dequeue_count", m.DequeueCount), zap.Error(err)}
	if handler.IsPermanent(err) {
		l.log.Error("listener: handler failed permanently", append(fields, zap.Duration("delay", delay))...)
	} else {
		l.log.Debug("listener: handler failed; the message will reappear", fields...)
	}
	if delay > 0 {
		b.mu.Lock()
		receipt := b.receipt(i)
		b.mu.Unlock()
		nr, uerr := l.q.UpdateVisibility(l.opCtx, m.ID, receipt, min(delay, queue.MaxVisibilityTimeout))
		if uerr == nil {
			l.stats.hidden.Add(1)
			b.mu.Lock()
			b.setReceipt(i, nr)
			b.mu.Unlock()
		} else {
			l.log.Debug("listener: hiding a failed message failed", zap.String("msg_id", m.ID), zap.Error(uerr))
		}
	}
	b.state[i].Store(stFailed)
}

// poison moves message i to the poison queue: put first, so that a crash
// between the two steps leaves a duplicate, never a loss; then delete with
// the newest receipt. It reports whether the message left the queue (if the
// put fails, the message stays and comes back as a failure would).
func (b *batch) poison(i int, reason string, cause error) bool {
	l := b.l
	m := b.msgs[i]
	fields := []zap.Field{zap.String("msg_id", m.ID), zap.Int("dequeue_count", m.DequeueCount),
		zap.String("reason", reason), zap.String("poison_queue", l.o.Poison.Name())}
	if cause != nil {
		fields = append(fields, zap.Error(cause))
	}
	id, err := l.o.Poison.Put(l.opCtx, m.Body, queue.PutOptions{TTL: queue.NoExpiry})
	if err != nil {
		l.log.Error("listener: putting a message to the poison queue failed; it stays in the queue", append(fields, zap.NamedError("put_error", err))...)
		b.state[i].Store(stFailed)
		return false
	}
	b.mu.Lock()
	receipt := b.receipt(i)
	b.mu.Unlock()
	derr := l.q.Delete(l.opCtx, m.ID, receipt)
	b.state[i].Store(stDone)
	l.stats.poisoned.Add(1)
	fields = append(fields, zap.String("poison_id", id))
	if derr != nil {
		// Someone else holds it now; it may reach the poison queue twice.
		l.log.Warn("listener: poisoned message could not be deleted from its queue", append(fields, zap.NamedError("delete_error", derr))...)
	} else {
		l.log.Error("listener: message moved to the poison queue", fields...)
	}
	return true
}

// releaseUnstarted hands a claimed but unstarted message back at shutdown.
func (b *batch) releaseUnstarted(i int) {
	b.mu.Lock()
	receipt := b.receipt(i)
	b.mu.Unlock()
	b.l.release(b.msgs[i].ID, receipt)
	b.state[i].Store(stDone)
	b.settle(1, 0)
}

// takeSucceeded collects the receipts of succeeded messages not yet
// deleted and marks them done. b.mu is held.
func (b *batch) takeSucceeded(rs []queue.Receipt) []queue.Receipt {
	for i := range b.msgs {
		if b.state[i].CompareAndSwap(stSucceeded, stDone) {
			rs = append(rs, queue.Receipt{ID: b.msgs[i].ID, PopReceipt: b.receipt(i)})
		}
	}
	return rs
}

// receiptBufs recycles the receipt slices of batch deletes.
var receiptBufs = sync.Pool{New: func() any {
	s := make([]queue.Receipt, 0, queue.MaxBatchSize)
	return &s
}}

// complete runs once, when the batch's last message finishes: it stops the
// timer and deletes what succeeded.
func (b *batch) complete() {
	buf := receiptBufs.Get().(*[]queue.Receipt)
	b.mu.Lock()
	b.closed = true
	if b.tick != nil {
		b.tick.Stop()
	}
	rs := b.takeSucceeded((*buf)[:0])
	b.mu.Unlock()
	b.l.deleteReceipts(rs)
	*buf = rs[:0]
	receiptBufs.Put(buf)
	b.l.wg.Done()
}

// maintain runs while the batch is unfinished: every flushAfter it
// deletes the successes so far, and at half the visibility timeout it
// extends every message still waiting or running, carrying the newest
// receipt forward.
func (b *batch) maintain() {
	l := b.l
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	rs := b.takeSucceeded(nil)
	now := l.o.Clock.Now()
	if !now.Before(b.renewAt) {
		b.renewHeld()
		b.renewAt = now.Add(l.o.VisibilityTimeout / 2)
	}
	b.tick = l.o.Clock.AfterFunc(min(flushAfter, b.renewAt.Sub(now)), b.maintain)
	b.mu.Unlock()
	l.deleteReceipts(rs)
}

// renewHeld extends the messages still waiting or running. b.mu is held.
func (b *batch) renewHeld() {
	l := b.l
	for i, m := range b.msgs {
		switch b.state[i].Load() {
		case stWaiting, stRunning:
		default:
			continue
		}
		nr, err := l.q.UpdateVisibility(l.opCtx, m.ID, b.receipt(i), l.o.VisibilityTimeout)
		if errors.Is(err, queue.ErrReceiptMismatch) || errors.Is(err, queue.ErrNotFound) {
			// Someone else owns it now, or it is gone: stop working on it.
			l.stats.leasesLost.Add(1)
			l.log.Warn("listener: lost a held message to its visibility timeout; cancelling its handler", zap.String("msg_id", m.ID), zap.Error(err))
			switch {
			case b.cancels != nil && b.cancels[i] != nil:
				b.cancels[i]() // a parallel runner's handler
			case b.inline && b.state[i].Load() == stRunning:
				b.cancel() // the inline runner's handler
			}
			b.state[i].CompareAndSwap(stWaiting, stDone)
			continue
		}
		if err != nil {
			l.log.Warn("listener: renewing a held message failed", zap.String("msg_id", m.ID), zap.Error(err))
			continue
		}
		b.setReceipt(i, nr)
		l.stats.renewed.Add(1)
	}
}

// deleteReceipts deletes succeeded messages in as few calls as the driver
// allows. A failed call, or a message whose own delete failed with a
// transient error, is tried again, three times in all; shutdown does not
// cancel it.
func (l *Listener) deleteReceipts(rs []queue.Receipt) {
	if len(rs) == 0 {
		return
	}
	const attempts = 3
	ctx := l.opCtx
	for attempt := 1; len(rs) > 0; attempt++ {
		last := attempt == attempts || ctx.Err() != nil
		res, err := l.q.DeleteBatch(ctx, rs)
		var retry []queue.Receipt
		var wait time.Duration
		deleted := 0
		if err != nil {
			if !queue.IsTransient(err) || last {
				l.stats.deleteErrors.Add(int64(len(rs)))
				l.log.Warn("listener: deleting processed messages failed; they will run again", zap.Int("messages", len(rs)), zap.Error(err))
				return
			}
			retry, wait = rs, retryWait(attempt, err)
		}
		for i, r := range res {
			switch {
			case r == nil:
				deleted++
			case errors.Is(r, queue.ErrReceiptMismatch):
				l.stats.mismatches.Add(1)
				l.log.Debug("listener: message was taken by another consumer before its delete", zap.String("msg_id", rs[i].ID))
			case errors.Is(r, queue.ErrNotFound):
				// Gone: deleted by an earlier attempt whose answer was lost,
				// expired, or taken and finished by another consumer.
				l.stats.notFound.Add(1)
				l.log.Debug("listener: message was gone before its delete", zap.String("msg_id", rs[i].ID))
			case queue.IsTransient(r) && !last:
				retry = append(retry, rs[i])
				wait = max(wait, retryWait(attempt, r))
			default:
				l.stats.deleteErrors.Add(1)
				l.log.Warn("listener: delete failed; the message will run again", zap.String("msg_id", rs[i].ID), zap.Error(r))
			}
		}
		l.stats.deleted.Add(int64(deleted))
		if len(retry) > 0 && !clock.Sleep(ctx, l.o.Clock, wait, nil) {
			l.stats.deleteErrors.Add(int64(len(retry)))
			return
		}
		rs = retry
	}
}

// retryWait is the pause before delete attempt n+1: the server's hint, or
// 100 ms times n.
func retryWait(n int, err error) time.Duration {
	if ra, ok := queue.RetryAfter(err); ok {
		return ra
	}
	return time.Duration(n) * 100 * time.Millisecond
}
