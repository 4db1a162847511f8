package listener

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
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
const flushAfter = time.Second

// sequentialBelow and stallAfter are variables only so that a count of
// instructions under valgrind, which slows everything some fifty times,
// can keep the batches it measures inline and unspilled, as they are
// outside valgrind (see export_test.go).
var (
	sequentialBelow = 5 * time.Microsecond
	stallAfter      = time.Millisecond
)

// The life of a fetched message. Each message of a batch has exactly one
// state, and only its owner changes it, by compare-and-swap:
//
//	fetched ──runner──▶ running ──runner──▶ succeeded ──delete──▶ done
//	   │                   │        └─────▶ settling ──────────▶ done
//	   ├──runner──▶ settling (drain release, poison unrun) ──────▶ done
//	   └──renewal (lease lost) ──▶ done ◀── renewal (lease lost) ─┘ (from running)
//
// A runner owns the message it claimed while it is fetched, running or
// settling; a batch delete owns succeeded messages; renewal may extend a
// fetched or running message (holding b.mu across the call, so a settler
// that then reads the receipt under b.mu gets the newest one) and takes a
// message whose lease it found lost. Nobody touches a message another path
// owns: renewal skips succeeded and settling messages, and a runner whose
// message was taken by renewal settles nothing but its counters.
const (
	stFetched   uint32 = iota // fetched, not claimed by a runner
	stRunning                 // its handler runs
	stSucceeded               // its handler returned nil; the batch delete takes it
	stSettling                // its runner is poisoning, releasing or hiding it
	stDone                    // deleted, released, hidden, poisoned, left to reappear, or lost
)

// batch is the messages of one get. Runners claim messages by index, each
// exactly once, and run them one after another; the first runner of a
// batch of fast handlers is the task's own goroutine (inline), and the
// batch's watchdog adds runners for the rest if it stalls. The runner that
// finishes the last message completes the batch, which deletes the
// successes in one call. While a batch is unfinished and not inline, a
// maintenance timer flushes successes early and extends messages still
// held at half the visibility timeout.
type batch struct {
	l     *Listener
	t     *task
	msgs  []*queue.Message
	state [queue.MaxBatchSize]atomic.Uint32
	// cancels[i] cancels the context message i's handler runs with; its
	// runner sets it before the message becomes running, and renewal
	// reads it only after taking the message from running.
	cancels [queue.MaxBatchSize]context.CancelFunc
	next    atomic.Int32 // index of the next message to claim
	left    atomic.Int32 // messages whose runner has not yet finished with them
	// unsettled is what the inline runner finished and has not settled
	// yet: messages<<32 | successes. It settles them at the end of its
	// run, unless spill (or, after a spill, the runner itself, message by
	// message) took them first with Swap(0), so that a slow message holds
	// back no slot, no count and no next get but its own.
	unsettled atomic.Uint64
	// handed is set by spill, before it takes unsettled.
	handed atomic.Bool
	// held counts the batch's messages held through a worker fault's
	// pause (see hold).
	held atomic.Int32
	// txDeleted[i]: message i's handler deleted it in its transaction
	// and then failed (settle.go); only its runner reads and writes it.
	txDeleted [queue.MaxBatchSize]bool
	// settles[i] is message i's TxSettler (settle.go), part of the batch
	// so that a handler's context costs no allocation of its own; set by
	// newBatch.
	settles [queue.MaxBatchSize]txSettle

	// pooled: a batch handler's pool runs the messages (batchcall.go);
	// t is nil and they do not count towards a task's threshold.
	pooled    bool
	mu        sync.Mutex  // guards the fields below
	receipts  []string    // newest pop receipts; nil while none has changed
	closed    bool        // completed
	onTask    bool        // the first runner is the task's goroutine
	handedOff bool        // the watchdog moved the task's loop to a new goroutine
	spilled   bool        // the watchdog has fired
	tick      clock.Timer // the next flush or renewal; nil until armed
	renewAt   time.Time   // when held messages are next extended
	// got is when the batch was dispatched, and leases[i], if set, when
	// message i's lease ends by its newest renewal (else got plus the
	// visibility timeout), by the listener's clock.
	got    time.Time
	leases *[queue.MaxBatchSize]time.Time // nil until a renewal
	// spans[i] follows message i while its runner has it (nil until a
	// message of the batch is traced; see trace.go).
	spans atomic.Pointer[[queue.MaxBatchSize]MessageSpan]
}

// receipt is message i's newest pop receipt. b.mu is held.
func (b *batch) receipt(i int) string {
	if b.receipts != nil {
		return b.receipts[i]
	}
	return b.msgs[i].PopReceipt
}

// newestReceipt reads message i's newest receipt, after any renewal under
// way has ended.
func (b *batch) newestReceipt(i int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.receipt(i)
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
// reports whether the batch's watchdog handed the task's loop to another
// goroutine, in which case the caller must end. now is when the get
// returned, by the listener's clock.
func (l *Listener) dispatch(t *task, ms []*queue.Message, now time.Time) (handedOff bool) {
	if l.pool != nil {
		l.dispatchPooled(ms)
		return false
	}
	n := len(ms)
	b := t.spare
	if b != nil {
		// A batch the task kept (see keep): a handler's context kept past
		// its return may still reach it, and reads msgs under b.mu.
		t.spare = nil
		b.mu.Lock()
		b.msgs = ms
		b.mu.Unlock()
	} else {
		b = newBatch(l, t, ms)
	}
	b.left.Store(int32(n))
	t.inFlight.Add(int32(n))
	l.inFlight.Add(int64(n))
	l.wg.Add(1) // the batch itself, until complete
	l.busy.Add(1)
	b.got = now
	b.renewAt = b.got.Add(l.o.VisibilityTimeout / 2)
	avg, known := l.ewma.known()
	if l.o.Dispatch == DispatchParallel || !known || avg >= sequentialBelow {
		b.mu.Lock()
		b.armMaintenance()
		b.mu.Unlock()
		for i := 0; i < n; i++ {
			l.wg.Go(b.runParallel)
		}
		return false
	}
	// The task lends the batch its handler context and its watchdog, and
	// takes them back after the run unless the loop was handed off (the
	// new goroutine makes its own) or they are spent (cancelled, fired).
	ctx, cancel, w := t.hctx, t.hcancel, t.watchdog
	t.hctx, t.hcancel, t.watchdog = nil, nil, nil
	if ctx == nil || ctx.Err() != nil {
		if cancel != nil {
			cancel()
		}
		ctx, cancel = l.handlerContext()
	}
	if w == nil {
		w = newWatchdog()
	}
	b.mu.Lock()
	b.onTask = true
	w.b.Store(b)
	w.timer.Reset(stallAfter)
	b.mu.Unlock()
	ctx, cancel = b.run(true, ctx, cancel)
	stopped := w.timer.Stop()
	b.mu.Lock()
	b.onTask = false
	if b.handedOff {
		b.mu.Unlock()
		cancel()
		return true
	}
	if ctx.Err() == nil {
		t.hctx, t.hcancel = ctx, cancel
	} else {
		cancel()
	}
	if stopped {
		w.b.Store(nil)
		t.watchdog = w
		// The watchdog never fired: the batch never spilled, so its only
		// runner was this goroutine, it has completed, and no timer or
		// runner refers to it any more. The task keeps it for its next.
		b.keep()
	}
	b.mu.Unlock()
	return false
}

// newBatch makes a batch of ms for task t (nil: a batch handler's pool).
func newBatch(l *Listener, t *task, ms []*queue.Message) *batch {
	b := &batch{l: l, t: t, msgs: ms}
	for i := range b.settles {
		b.settles[i] = txSettle{b: b, i: int32(i)}
	}
	return b
}

// keep readies a completed inline batch for its task's next get, so that
// a batch of fast handlers costs no allocation (issue 34): t.spare. Only
// the task's goroutine calls it, with b.mu held, once the batch's only
// runner (itself) has finished and the watchdog was stopped before it
// fired. Nothing but a handler's context kept past its return can reach
// the batch then (runnerCtx), and that finds no message to settle.
func (b *batch) keep() {
	if !b.closed || b.spilled || b.tick != nil || b.pooled {
		return // not reached: see the caller
	}
	n := len(b.msgs)
	b.msgs = nil
	for i := range n {
		b.state[i].Store(stFetched)
	}
	clear(b.cancels[:n])
	clear(b.txDeleted[:n])
	b.next.Store(0)
	b.left.Store(0)
	b.unsettled.Store(0)
	b.handed.Store(false)
	b.held.Store(0)
	b.receipts = nil
	b.closed, b.onTask, b.handedOff = false, false, false
	b.renewAt, b.got = time.Time{}, time.Time{}
	b.leases = nil
	b.spans.Store(nil)
	b.t.spare = b
}

// watchdog spills the inline batch it watches if that batch runs longer
// than stallAfter. It belongs to one batch at a time: a task reuses it for
// its next inline batch only if it was stopped before it fired.
type watchdog struct {
	timer *time.Timer
	b     atomic.Pointer[batch]
}

func newWatchdog() *watchdog {
	w := &watchdog{}
	w.timer = time.AfterFunc(time.Hour, func() {
		if b := w.b.Load(); b != nil {
			b.spill()
		}
	})
	w.timer.Stop()
	return w
}

// spill rescues a stalled inline batch: its unclaimed messages go to new
// runners, the maintenance timer starts, and the task's loop goes on in a
// new goroutine while this one waits for its handler. It runs once, on
// the batch's own watchdog.
func (b *batch) spill() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.spilled || !b.onTask {
		return
	}
	b.spilled = true
	b.armMaintenance()
	for k := len(b.msgs) - int(b.next.Load()); k > 0; k-- {
		b.l.wg.Go(b.runParallel)
	}
	// The task's goroutine is inside this batch, so the group is not done.
	b.handedOff = true
	b.handed.Store(true)
	b.l.group.Go(b.t.loop)
	// What the inline runner finished before the stall is settled now,
	// not when its slow message returns. b.mu is released first: this
	// may complete the batch, which takes it.
	b.mu.Unlock()
	b.settleUnsettled()
	b.mu.Lock()
}

// settleUnsettled settles what the inline runner has finished and not
// settled, if anything.
func (b *batch) settleUnsettled() {
	if v := b.unsettled.Swap(0); v != 0 {
		b.settle(int(v>>32), int(v&(1<<32-1)))
	}
}

// runParallel is a runner on its own goroutine, with its own context.
func (b *batch) runParallel() {
	ctx, cancel := b.l.handlerContext()
	_, cancel = b.run(false, ctx, cancel)
	cancel()
}

// run claims and handles messages until none are left to claim, with
// handler context ctx, which it replaces when it finds it cancelled (by
// Abort, or by renewal for a lost lease); it returns the context it ends
// with. The inline runner settles its counters once at the end (or, once
// its batch has spilled, as each message finishes; see unsettled); a
// parallel runner settles each message as it finishes.
func (b *batch) run(inline bool, ctx *runnerCtx, cancel context.CancelFunc) (*runnerCtx, context.CancelFunc) {
	l := b.l
	start := time.Now()
	ran, ok, claimed := 0, 0, 0
	for {
		i := int(b.next.Add(1)) - 1
		if i >= len(b.msgs) {
			break
		}
		claimed++
		if !inline {
			start = time.Now()
		}
		switch m := b.msgs[i]; {
		case l.draining.Load():
			b.releaseUnstarted(i)
		case l.o.Poison != nil && m.DequeueCount > l.o.MaxDequeueCount && l.counted(m) > l.o.MaxDequeueCount:
			// It was fetched this often before and never finished: it
			// crashes its worker. Poison it without running it again.
			if b.state[i].CompareAndSwap(stFetched, stSettling) {
				b.traceStart(ctx, i)
				b.poison(i, "dequeue count above the maximum before the run", nil)
				b.traceEnd(i, nil)
				b.state[i].Store(stDone)
			}
		default:
			if ctx.Err() != nil {
				// Aborted, or the lease of the runner's last message was
				// lost: the next handler gets a live context.
				cancel()
				ctx, cancel = l.handlerContext()
			}
			b.cancels[i] = cancel
			if !b.state[i].CompareAndSwap(stFetched, stRunning) {
				break // renewal found its lease lost while it waited
			}
			err, end := b.runHandler(b.traceStart(b.settleContext(ctx, i), i), i, &start)
			if err != nil {
				// Once, at the source of every sink (the log, the poison
				// envelope and the tools that read it): no URL's signature
				// or password, no token=, in a failure's reason.
				err = queue.RedactError(err)
			}
			ran++
			if !inline {
				l.ewma.add(time.Since(start))
			}
			switch {
			case b.settledInTx(i, err): // deleted in the handler's transaction (settle.go)
				ok++
			case err == nil && b.state[i].CompareAndSwap(stRunning, stSucceeded):
				ok++
			case err != nil && b.state[i].CompareAndSwap(stRunning, stSettling):
				switch end {
				case holdHandBack:
					b.workerFault(i, err, true)
				case holdLapsed:
					b.holdLapsed(i, err)
				case holdExpired:
					b.holdExpired(i, err)
				default:
					b.failed(i, err)
				}
				b.state[i].Store(stDone)
			default:
				// Renewal found its lease lost and took it, and is about to
				// cancel ctx, if it has not yet: the next message must not
				// run under that context.
				if err != nil && end == holdNone {
					l.stats.failed.Add(1)
					l.rememberFailure(m.ID, err)
				}
				cancel()
				ctx, cancel = l.handlerContext()
			}
			b.traceEnd(i, err)
		}
		if !inline {
			b.settle(claimed, ok)
		} else {
			b.unsettled.Add(uint64(claimed)<<32 | uint64(ok))
			if b.handed.Load() {
				b.settleUnsettled()
			}
		}
		claimed, ok = 0, 0
	}
	if inline {
		if ran > 0 {
			l.ewma.add(time.Since(start) / time.Duration(ran))
		}
		b.settleUnsettled()
	}
	return ctx, cancel
}

// settle accounts for n messages a runner has finished with, ok of them
// succeeded: it frees their handler slots, wakes the task at its new-batch
// threshold, and completes the batch when nothing is left.
func (b *batch) settle(n, ok int) {
	l := b.l
	l.sem.Release(int64(n))
	if ok > 0 {
		l.stats.processed.Add(int64(ok))
		l.faultsOver() // the worker has what it needs again
	}
	l.inFlight.Add(-int64(n))
	if !b.pooled {
		b.t.finished(n)
	}
	if b.left.Add(-int32(n)) == 0 {
		b.complete()
	}
}

// failed handles a handler error on a message its runner now settles:
// count it, log it, and poison it, release it (shutting down) or hide it
// for the retry delay. The message is not deleted.
func (b *batch) failed(i int, err error) {
	l := b.l
	m := b.msgs[i]
	l.stats.failed.Add(1)
	var pe *handler.PanicError
	if errors.As(err, &pe) {
		l.stats.panics.Add(1)
	}
	if handler.IsWorkerFault(err) {
		b.workerFault(i, err, false)
		return
	}
	if b.overloadFailed(i, err) {
		return // overload, under an adaptive limit: not the message's fault (flow.go)
	}
	if l.o.Poison != nil {
		switch {
		case handler.IsPermanent(err):
			if b.poison(i, "permanent failure", err) {
				return
			}
		case m.DequeueCount >= l.o.MaxDequeueCount && l.counted(m) >= l.o.MaxDequeueCount:
			if b.poison(i, "failed at the maximum dequeue count", err) {
				return
			}
		}
	}
	l.rememberFailure(m.ID, err)
	if l.draining.Load() && !handler.IsPermanent(err) {
		// Shutting down (the grace period ended, or the handler gave up on
		// its own): hand the message to another worker now rather than
		// after its visibility timeout.
		l.log.Debug("listener: handler failed while draining; the message is handed back",
			zap.String("msg_id", m.ID), zap.Int("dequeue_count", m.DequeueCount), zap.Error(err))
		l.release(m.ID, b.newestReceipt(i))
		b.traceRequeued(i, 0, true)
		return
	}
	b.retryLater(i, err)
}

// counted is m's dequeue count less its deliveries that failed here for
// the worker's own lack of resources: what poisoning counts.
func (l *Listener) counted(m *queue.Message) int {
	return m.DequeueCount - l.failures.excused(m.ID)
}

// poison moves message i, which its runner settles, to the poison queue: put first, so that a crash
// between the two steps leaves a duplicate, never a loss; then delete with
// the newest receipt. It reports whether the message left the queue (if the
// put fails, the message stays and comes back as a failure would).
func (b *batch) poison(i int, reason string, cause error) bool {
	l := b.l
	m := b.msgs[i]
	if !b.heldAfterTx(i) {
		// Its handler's transaction deleted it and committed: it left
		// the queue with the handler's writes, and a poisoned copy would
		// run them again.
		l.log.Debug("listener: the failed message was deleted in its handler's transaction; not poisoned",
			zap.String("msg_id", m.ID), zap.Int("dequeue_count", m.DequeueCount))
		return true
	}
	fields := []zap.Field{zap.String("msg_id", m.ID), zap.Int("dequeue_count", m.DequeueCount),
		zap.String("reason", reason), zap.String("poison_queue", l.o.Poison.Name())}
	if cause != nil {
		fields = append(fields, zap.Error(cause))
	}
	// A body too large for the envelope is compressed, or cut short and
	// marked so; only where the limit leaves no room for any header is it
	// put bare, and never one that starts like an envelope (its first line
	// would be read as a header the producer wrote).
	body, bare, err := poison.EncodeOrBare(l.poisonRecord(m, cause), l.o.Poison.MaxBodySize())
	if errors.Is(err, poison.ErrImitation) {
		b.hideUnpoisonable(i, fields, err)
		return true
	}
	if err != nil {
		l.log.Error("listener: the message cannot be put to the poison queue; it stays in the queue", append(fields, zap.NamedError("envelope_error", err))...)
		return false
	}
	if bare {
		l.log.Warn("listener: the poison queue's limit leaves no room for the envelope; putting the bare body", fields...)
	}
	id, err := l.o.Poison.Put(b.traceContext(i, l.opCtx), body, queue.PutOptions{TTL: queue.NoExpiry})
	if err != nil {
		l.log.Error("listener: putting a message to the poison queue failed; it stays in the queue", append(fields, zap.NamedError("put_error", err))...)
		return false
	}
	l.failures.forget(m.ID)
	derr := l.q.Delete(l.opCtx, m.ID, b.newestReceipt(i))
	fields = append(fields, zap.String("poison_id", id))
	b.tracePoisoned(i, reason, id)
	if errors.Is(derr, queue.ErrNotFound) && l.isExpired(m) {
		derr = nil // it expired meanwhile: gone from its queue, kept in the poison queue
	}
	if derr != nil {
		// Someone else holds it now, or the delete failed: it may come
		// back and reach the poison queue twice. It is counted poisoned
		// only when it leaves the queue, so that Drained counts it once.
		l.log.Warn("listener: poisoned message could not be deleted from its queue", append(fields, zap.NamedError("delete_error", derr))...)
	} else {
		l.stats.poisoned.Add(1)
		l.log.Error("listener: message moved to the poison queue", fields...)
	}
	return true
}

// hideUnpoisonable settles message i, which can never be poisoned (its
// body imitates an envelope and the poison queue's limit leaves no room
// for one): it would otherwise run again at every retry delay, and be got
// again at every visibility timeout once past the maximum dequeue count,
// for as long as it lives. It is hidden instead for the longest a hide
// may last, or the rest of its life if that is shorter, and stays in its
// queue for an operator to find (Peek, Count).
func (b *batch) hideUnpoisonable(i int, fields []zap.Field, cause error) {
	l := b.l
	m := b.msgs[i]
	d := queue.MaxVisibilityTimeout
	if !m.ExpiresAt.IsZero() {
		d = min(d, max(m.ExpiresAt.Sub(l.o.Clock.Now()), 0))
	}
	fields = append(fields, zap.NamedError("envelope_error", cause), zap.Duration("hidden_for", d))
	if d == 0 {
		// Expired by the listener's clock: left to its visibility timeout,
		// as any expired message whose poisoning failed (retryLater,
		// holdExpired). Released, a backend whose clock lags would hand it
		// out at once, to run and be released again, in a tight loop.
		l.failures.forget(m.ID)
		l.log.Error("listener: the message can never be poisoned (its body imitates a poison envelope and the poison queue's limit leaves no room for one), and it has expired; left to its visibility timeout", fields...)
		return
	}
	if _, err := l.q.UpdateVisibility(l.opCtx, m.ID, b.newestReceipt(i), d); err != nil {
		l.log.Error("listener: the message can never be poisoned, and hiding it failed; it comes back at the end of its visibility timeout", append(fields, zap.NamedError("update_error", err))...)
		return
	}
	l.failures.forget(m.ID)
	l.stats.hidden.Add(1)
	l.log.Error("listener: the message can never be poisoned (its body imitates a poison envelope and the poison queue's limit leaves no room for one); hidden rather than run again", fields...)
}

// poisonRecord is what the poison envelope keeps of m: its identity, and
// its last failure, cause (the run that failed now), or else the failure
// this listener remembers from its last run here.
func (l *Listener) poisonRecord(m *queue.Message, cause error) poison.Message {
	r := poison.Message{ID: m.ID, Queue: l.q.Name(), DequeueCount: m.DequeueCount, FailedAt: l.o.Clock.Now(),
		InsertedAt: m.InsertedAt, ExpiresAt: m.ExpiresAt, Body: m.Body, Metadata: m.Metadata}
	last, known := l.failures.last(m.ID)
	switch {
	case cause == nil:
		r.Rule, r.Reason = poison.RuleOverMaxDequeue, last
		if !known {
			r.Reason = fmt.Sprintf("dequeue count %d is above the maximum %d: earlier runs ended without a verdict (a crash, a lost lease, another worker)", m.DequeueCount, l.o.MaxDequeueCount)
		}
	case errExpiring(cause):
		r.Rule, r.Reason = poison.RuleExpiring, cause.Error()
	case handler.IsPermanent(cause):
		r.Rule, r.Reason = poison.RulePermanent, cause.Error()
	default:
		r.Rule, r.Reason = poison.RuleMaxDequeue, cause.Error()
	}
	return r
}

// rememberFailure records a failed message's error for its poisoning.
func (l *Listener) rememberFailure(id string, err error) {
	if l.o.Poison != nil {
		l.failures.remember(id, err)
	}
}

// releaseUnstarted hands a claimed but unstarted message back at shutdown.
func (b *batch) releaseUnstarted(i int) {
	if b.state[i].CompareAndSwap(stFetched, stSettling) {
		b.l.release(b.msgs[i].ID, b.newestReceipt(i))
		b.state[i].Store(stDone)
	}
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
	b.l.busy.Add(-1)
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
		if b.renewHeld() {
			b.renewAt = now.Add(l.o.VisibilityTimeout / 2)
		} else {
			// A renewal failed (or ran out of time): try again soon, well
			// before the lease it meant to extend ends at vis/2 from now.
			b.renewAt = now.Add(renewRetry(l.o.VisibilityTimeout))
		}
	}
	b.tick = l.o.Clock.AfterFunc(min(flushAfter, b.renewAt.Sub(now)), b.maintain)
	// The flush may outlast the batch: Wait waits for it too (the batch
	// is open, so the WaitGroup is not at zero).
	l.wg.Add(1)
	l.busy.Add(1)
	b.mu.Unlock()
	defer l.wg.Done()
	defer l.busy.Add(-1)
	l.deleteReceipts(rs)
}

// renewRetry is how soon a failed renewal is tried again: an eighth of
// the visibility timeout, at most flushAfter, so that a few failures in a
// row still leave most of the half lease that remained.
func renewRetry(vis time.Duration) time.Duration {
	return min(vis/8, flushAfter)
}

// renewHeld extends the messages still fetched or running, holding b.mu
// across each call so that a runner settling one of them meanwhile reads
// the newest receipt. A message whose lease is lost is taken from its
// runner (whose handler is cancelled). The calls of one pass share a
// deadline of a quarter of the visibility timeout, so that a hung backend
// blocks the batch's settles for no longer; messages it did not reach are
// tried again with the failures. It reports whether every message held
// was extended or found lost. b.mu is held.
func (b *batch) renewHeld() (ok bool) {
	l := b.l
	ctx, cancel := context.WithTimeout(l.opCtx, l.o.VisibilityTimeout/4)
	defer cancel()
	ok = true
	for i, m := range b.msgs {
		switch b.state[i].Load() {
		case stFetched, stRunning:
		default:
			continue
		}
		if ctx.Err() != nil {
			ok = false
			break
		}
		at := l.o.Clock.Now()
		nr, err := l.q.UpdateVisibility(ctx, m.ID, b.receipt(i), l.o.VisibilityTimeout)
		if errors.Is(err, queue.ErrReceiptMismatch) || errors.Is(err, queue.ErrNotFound) {
			// Someone else owns it now, or it is gone: stop working on it.
			switch {
			case b.state[i].CompareAndSwap(stFetched, stDone):
			case b.state[i].CompareAndSwap(stRunning, stDone):
				b.cancels[i]() // cancels this handler only: its runner renews its context after
			default:
				continue // its runner settles it meanwhile, and will find it gone
			}
			l.stats.leasesLost.Add(1)
			l.log.Warn("listener: lost a held message to its visibility timeout", zap.String("msg_id", m.ID), zap.Error(err))
			continue
		}
		if err != nil {
			ok = false
			l.log.Warn("listener: renewing a held message failed; trying again soon", zap.String("msg_id", m.ID),
				zap.Duration("delay", renewRetry(l.o.VisibilityTimeout)), zap.Error(err))
			continue
		}
		b.setReceipt(i, nr)
		if b.leases == nil {
			b.leases = new([queue.MaxBatchSize]time.Time)
		}
		b.leases[i] = at.Add(l.o.VisibilityTimeout)
		l.stats.renewed.Add(1)
	}
	return ok
}

// deleteReceipts deletes succeeded messages in as few calls as the driver
// allows. A failed call, or a message whose own delete failed with a
// transient error, is tried again, three times in all; shutdown does not
// cancel it.
func (l *Listener) deleteReceipts(rs []queue.Receipt) {
	if len(rs) == 0 {
		return
	}
	// Their handlers succeeded: a failure remembered from an earlier run
	// is no longer their last verdict, and most leave the queue now.
	if l.failures.n.Load() != 0 {
		for _, r := range rs {
			l.failures.forget(r.ID)
		}
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
