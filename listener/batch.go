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
// less than starting a goroutine for it would, so a batch of them runs on
// one goroutine; a sequential batch not finished after stallAfter spills
// its unstarted messages onto parallel runners, so one slow message never
// holds the others back.
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
// deletes the successes in one call. A renewal timer at half the visibility
// timeout flushes successes early and extends messages still held.
type batch struct {
	l     *Listener
	t     *task
	msgs  []*queue.Message
	state []atomic.Uint32
	next  atomic.Int32 // index of the next message to claim
	left  atomic.Int32 // messages not finished

	mu       sync.Mutex // guards receipts, closed, tick, renewAt, stall
	receipts []string   // newest pop receipt of each message
	closed   bool
	tick     clock.Timer // the next flush or renewal
	renewAt  time.Time   // when held messages are next extended
	stall    *time.Timer
}

// dispatch starts handling a fetched batch and returns at once.
func (l *Listener) dispatch(t *task, ms []*queue.Message) {
	n := len(ms)
	b := &batch{l: l, t: t, msgs: ms, state: make([]atomic.Uint32, n), receipts: make([]string, n)}
	for i, m := range ms {
		b.receipts[i] = m.PopReceipt
	}
	b.left.Store(int32(n))
	t.inFlight.Add(int32(n))
	l.inFlight.Add(int64(n))
	l.wg.Add(1) // the batch itself, until complete
	b.mu.Lock()
	b.renewAt = l.o.Clock.Now().Add(l.o.VisibilityTimeout / 2)
	b.tick = l.o.Clock.AfterFunc(min(flushAfter, l.o.VisibilityTimeout/2), b.maintain)
	avg, known := l.ewma.known()
	if l.o.Dispatch == DispatchParallel || !known || avg >= sequentialBelow || n == 1 {
		for i := 0; i < n; i++ {
			l.wg.Go(func() { b.run(true) })
		}
	} else {
		l.wg.Go(func() { b.run(false) })
		b.stall = time.AfterFunc(stallAfter, b.spill)
	}
	b.mu.Unlock()
}

// run claims and handles messages until none are left to claim. A
// parallel runner times each call; a sequential one times its whole run.
func (b *batch) run(parallel bool) {
	l := b.l
	var start time.Time
	ran := 0
	if !parallel {
		start = time.Now()
	}
	for {
		i := int(b.next.Add(1)) - 1
		if i >= len(b.msgs) {
			break
		}
		if l.draining.Load() {
			b.releaseUnstarted(i)
			continue
		}
		b.state[i].Store(stRunning)
		var err error
		if parallel {
			s := time.Now()
			err = l.h(l.handlerCtx, b.msgs[i])
			l.ewma.add(time.Since(s))
		} else {
			err = l.h(l.handlerCtx, b.msgs[i])
			ran++
		}
		b.finish(i, err)
	}
	if !parallel && ran > 0 {
		l.ewma.add(time.Since(start) / time.Duration(ran))
	}
}

// spill moves the unstarted messages of a stalled sequential batch onto
// parallel runners.
func (b *batch) spill() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	for k := len(b.msgs) - int(b.next.Load()); k > 0; k-- {
		b.l.wg.Go(func() { b.run(true) })
	}
}

// finish records a handler's result.
func (b *batch) finish(i int, err error) {
	l := b.l
	l.sem.Release(1)
	if err == nil {
		l.stats.processed.Add(1)
		b.state[i].Store(stSucceeded)
	} else {
		b.failed(i, err)
	}
	b.t.finished()
	l.inFlight.Add(-1)
	if b.left.Add(-1) == 0 {
		b.complete()
	}
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
	delay := l.o.RetryDelay(m, err)
	fields := []zap.Field{zap.String("msg_id", m.ID), zap.Int("dequeue_count", m.DequeueCount), zap.Error(err)}
	if handler.IsPermanent(err) {
		l.log.Error("listener: handler failed permanently", append(fields, zap.Duration("delay", delay))...)
	} else {
		l.log.Debug("listener: handler failed; the message will reappear", fields...)
	}
	if delay > 0 {
		b.mu.Lock()
		receipt := b.receipts[i]
		b.mu.Unlock()
		ctx, cancel := l.deleteCtx()
		nr, uerr := l.q.UpdateVisibility(ctx, m.ID, receipt, min(delay, queue.MaxVisibilityTimeout))
		cancel()
		if uerr == nil {
			l.stats.hidden.Add(1)
			b.mu.Lock()
			b.receipts[i] = nr
			b.mu.Unlock()
		} else {
			l.log.Debug("listener: hiding a failed message failed", zap.String("msg_id", m.ID), zap.Error(uerr))
		}
	}
	b.state[i].Store(stFailed)
}

// releaseUnstarted hands a claimed but unstarted message back at shutdown.
func (b *batch) releaseUnstarted(i int) {
	l := b.l
	b.mu.Lock()
	receipt := b.receipts[i]
	b.mu.Unlock()
	ctx, cancel := l.deleteCtx()
	l.release(ctx, b.msgs[i].ID, receipt)
	cancel()
	b.state[i].Store(stDone)
	l.sem.Release(1)
	b.t.finished()
	l.inFlight.Add(-1)
	if b.left.Add(-1) == 0 {
		b.complete()
	}
}

// takeSucceeded collects the receipts of succeeded messages not yet
// deleted and marks them done. b.mu is held.
func (b *batch) takeSucceeded() []queue.Receipt {
	var rs []queue.Receipt
	for i := range b.msgs {
		if b.state[i].CompareAndSwap(stSucceeded, stDone) {
			rs = append(rs, queue.Receipt{ID: b.msgs[i].ID, PopReceipt: b.receipts[i]})
		}
	}
	return rs
}

// complete runs once, when the batch's last message finishes: it stops the
// timers and deletes what succeeded.
func (b *batch) complete() {
	b.mu.Lock()
	b.closed = true
	b.tick.Stop()
	if b.stall != nil {
		b.stall.Stop()
	}
	rs := b.takeSucceeded()
	b.mu.Unlock()
	b.l.deleteReceipts(rs)
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
	rs := b.takeSucceeded()
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
	ctx, cancel := l.deleteCtx()
	defer cancel()
	for i, m := range b.msgs {
		switch b.state[i].Load() {
		case stWaiting, stRunning:
		default:
			continue
		}
		nr, err := l.q.UpdateVisibility(ctx, m.ID, b.receipts[i], l.o.VisibilityTimeout)
		if err != nil {
			l.log.Warn("listener: renewing a held message failed", zap.String("msg_id", m.ID), zap.Error(err))
			continue
		}
		b.receipts[i] = nr
		l.stats.renewed.Add(1)
	}
}

// deleteReceipts deletes succeeded messages in as few calls as the driver
// allows, retrying transient failures; shutdown does not cancel it.
func (l *Listener) deleteReceipts(rs []queue.Receipt) {
	if len(rs) == 0 {
		return
	}
	ctx, cancel := l.deleteCtx()
	defer cancel()
	var res []error
	var err error
	for attempt := 0; ; attempt++ {
		res, err = queue.DeleteBatch(ctx, l.q, rs)
		if err == nil || !queue.IsTransient(err) || attempt == 2 || ctx.Err() != nil {
			break
		}
		wait := time.Duration(attempt+1) * 100 * time.Millisecond
		if ra, ok := queue.RetryAfter(err); ok {
			wait = ra
		}
		if !clock.Sleep(ctx, l.o.Clock, wait, nil) {
			break
		}
	}
	if err != nil {
		l.stats.deleteErrors.Add(int64(len(rs)))
		l.log.Warn("listener: deleting processed messages failed; they will run again", zap.Int("messages", len(rs)), zap.Error(err))
		return
	}
	for i, r := range res {
		switch {
		case r == nil:
			l.stats.deleted.Add(1)
		case errors.Is(r, queue.ErrReceiptMismatch):
			l.stats.mismatches.Add(1)
			l.log.Debug("listener: message was taken by another consumer before its delete", zap.String("msg_id", rs[i].ID))
		case errors.Is(r, queue.ErrNotFound):
			l.stats.notFound.Add(1)
			l.log.Debug("listener: message was gone before its delete", zap.String("msg_id", rs[i].ID))
		default:
			l.stats.deleteErrors.Add(1)
			l.log.Warn("listener: delete failed; the message will run again", zap.String("msg_id", rs[i].ID), zap.Error(r))
		}
	}
}

var _ = context.Background
