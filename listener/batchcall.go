package listener

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
)

// Batch handlers (NewBatch). The tasks fetch as they do for a Func, and
// each get's messages still form one batch (batch.go): the unit of
// renewal, of the flush and of the delete of the successes, and of every
// message's state. What changes is who runs them: instead of a runner per
// message, the get's messages join the listener's pool, and the pool hands
// them to the batch handler in calls of up to BatchMax, a call made of
// one or more gets' messages, oldest first. A call starts when it is full,
// when its oldest message has waited BatchWait (0: at once), and only
// while fewer than Concurrency calls run.
//
// While a message waits in the pool it is fetched (stFetched), and its
// batch's maintenance timer renews it as it renews a message waiting for a
// runner; a renewal that finds its lease lost takes it, and the call that
// would have run it skips it. A call makes the messages it runs running
// with the call's context as their cancel, so a lease lost during the call
// cancels the call: nothing runs on after its lease was lost without its
// context cancelled. The call settles each message alone by its outcome,
// on the same paths as a runner (failed, poison): the failure path is the
// single handler's, message by message. On drain the pool hands back at
// once every message it still holds.

// Batch handler defaults and bounds.
const (
	// DefaultBatchMax is the most messages one batch handler call gets
	// when Options.BatchMax is 0: 100, a common bulk INSERT size and about
	// three full gets (the Best Practices article's 32), so that a call
	// amortises its fixed cost over a few gets' worth of messages.
	DefaultBatchMax = 100
	// MaxBatchMax bounds BatchMax: every message of a call is held (and
	// renewed, one call each on most backends) while the call fills and
	// runs, so a larger call risks its leases more than it saves.
	MaxBatchMax = 10000
	// DefaultBatchConcurrency is how many batch handler calls run at once
	// when Options.Concurrency is 0: two, one running while the next one
	// fills, as DefaultConcurrency is two batches for a Func.
	DefaultBatchConcurrency = 2
)

// NewBatch returns a listener that feeds messages of q to h in calls of
// up to o.BatchMax messages, waiting up to o.BatchWait for a partial call
// to fill (see Options.BatchMax). o.Concurrency counts calls. h is wrapped
// in handler.RecoverBatch: a panic fails every message of its call.
func NewBatch(q *queue.Queue, h handler.BatchFunc, o Options) (*Listener, error) {
	if q == nil {
		return nil, errors.New("listener: queue is nil")
	}
	if h == nil {
		return nil, fmt.Errorf("listener: batch handler for queue %q is nil", q.Name())
	}
	if err := o.validateBatch(); err != nil {
		return nil, fmt.Errorf("%w (queue %q)", err, q.Name())
	}
	if o.BatchMax == 0 {
		o.BatchMax = DefaultBatchMax
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultBatchConcurrency
	}
	l, err := newListener(q, o, true, func(l *Listener) {
		l.bh = handler.ChainBatch(h, handler.RecoverBatch())
		l.pool = &pool{l: l}
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// validateBatch checks the batch handler's options, naming the field.
func (o Options) validateBatch() error {
	switch {
	case o.BatchMax < 0 || o.BatchMax > MaxBatchMax:
		return fmt.Errorf("listener: batch_handler.max: %d is outside 1..%d", o.BatchMax, MaxBatchMax)
	case o.BatchWait < 0:
		return fmt.Errorf("listener: batch_handler.wait: %s is negative", o.BatchWait)
	case o.Adaptive != nil:
		return errors.New("listener: concurrency: an adaptive concurrency (auto) is not supported with a batch handler, whose concurrency counts calls")
	}
	return nil
}

// slots is how many messages the tasks may hold at once: Concurrency of
// them for a Func; for a batch handler, the calls that may run plus one
// filling, BatchMax each.
func (o Options) slots(batch bool) int {
	if batch {
		return (o.Concurrency + 1) * o.BatchMax
	}
	return o.Concurrency
}

// getSize is how many messages a task asks for (and takes slots for)
// before a get.
func (l *Listener) getSize() int {
	return min(l.o.BatchSize, l.o.slots(l.pool != nil))
}

// ref is one message of a batch.
type ref struct {
	b  *batch
	i  int
	at time.Time // when it joined the pool, by the listener's clock
}

// pool holds fetched messages until a batch handler call takes them.
type pool struct {
	l       *Listener
	mu      sync.Mutex
	waiting []ref       // oldest first
	running int         // calls running
	timer   clock.Timer // fires when the oldest has waited BatchWait; nil if none
	due     time.Time   // when timer fires
}

// dispatchPooled hands a get's messages to the pool. They do not count
// towards the task's new-batch threshold (a call may wait for more gets),
// and their maintenance timer runs from now.
func (l *Listener) dispatchPooled(ms []*queue.Message) {
	n := len(ms)
	b := &batch{l: l, msgs: ms, pooled: true}
	b.left.Store(int32(n))
	l.inFlight.Add(int64(n))
	l.wg.Add(1) // the batch itself, until complete
	l.busy.Add(1)
	b.got = l.o.Clock.Now()
	b.renewAt = b.got.Add(l.o.VisibilityTimeout / 2)
	b.mu.Lock()
	b.armMaintenance()
	b.mu.Unlock()
	p := l.pool
	p.mu.Lock()
	if l.draining.Load() {
		p.mu.Unlock()
		p.release([]ref(nil), b)
		return
	}
	for i := range ms {
		// Waiting for the clock (a call's fill wait, renewals) as a
		// message held through a worker fault's pause does: the test
		// kit's sign that only a move of the clock moves it on.
		b.hold()
		p.waiting = append(p.waiting, ref{b: b, i: i, at: b.got})
	}
	p.startLocked()
	p.mu.Unlock()
}

// startLocked starts the calls that may start: full ones, or one whose
// oldest message has waited BatchWait, while a call slot is free; and
// arms the timer for the oldest message still waiting. p.mu is held.
func (p *pool) startLocked() {
	l := p.l
	now := l.o.Clock.Now()
	for p.running < l.o.Concurrency && len(p.waiting) > 0 && !l.draining.Load() {
		due := p.waiting[0].at.Add(l.o.BatchWait)
		if len(p.waiting) < l.o.BatchMax && now.Before(due) {
			break
		}
		n := min(len(p.waiting), l.o.BatchMax)
		call := make([]ref, n)
		copy(call, p.waiting)
		for _, r := range call {
			r.b.unhold()
		}
		// slices.Delete zeroes the tail it leaves: no stale ref there
		// keeps a finished get's batch, and its bodies, alive.
		p.waiting = slices.Delete(p.waiting, 0, n)
		p.running++
		l.wg.Go(func() { p.run(call) })
	}
	if len(p.waiting) == 0 || l.draining.Load() || p.running >= l.o.Concurrency {
		// A call's end starts the next; the drain hands them back.
		p.stopTimerLocked()
		return
	}
	due := p.waiting[0].at.Add(l.o.BatchWait)
	if p.timer != nil && p.due.Equal(due) {
		return
	}
	p.stopTimerLocked()
	p.due = due
	var t clock.Timer
	t = l.o.Clock.AfterFunc(due.Sub(now), func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.timer == t {
			p.timer = nil
			p.startLocked()
		}
	})
	p.timer = t
}

func (p *pool) stopTimerLocked() {
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
}

// drain hands back every message waiting in the pool: shutdown began.
// It runs on its own goroutine, which l.wg counts.
func (p *pool) drain() {
	p.mu.Lock()
	rs := p.waiting
	p.waiting = nil
	p.stopTimerLocked()
	for _, r := range rs {
		r.b.unhold()
	}
	p.mu.Unlock()
	p.release(rs, nil)
}

// release hands back unstarted messages (rs, and every message of b if b
// is not nil) and settles them.
func (p *pool) release(rs []ref, b *batch) {
	if b != nil {
		for i := range b.msgs {
			rs = append(rs, ref{b: b, i: i})
		}
	}
	var tally settleTally
	for _, r := range rs {
		r.b.releaseUnstarted(r.i)
		tally.add(r.b, false)
	}
	tally.settle()
}

// run is one batch handler call on its own goroutine: it skips what is
// no longer its to run (drain: handed back; over the dequeue limit:
// poisoned unrun; lease lost while waiting: dropped), calls the handler
// with the rest, and settles each message by its own outcome.
func (p *pool) run(call []ref) {
	l := p.l
	defer func() {
		p.mu.Lock()
		p.running--
		p.startLocked()
		p.mu.Unlock()
	}()
	ctx, cancel := l.handlerContext()
	defer cancel()
	// Renewal calls a running message's cancel when it finds its lease
	// lost: for a call, that cancels every message's handling, so the
	// call remembers why (see bystander).
	var leaseLost atomic.Bool
	cancelCall := func() {
		leaseLost.Store(true)
		cancel()
	}
	var tally settleTally
	defer tally.settle()
	runs := make([]ref, 0, len(call))
	ms := make([]*queue.Message, 0, len(call))
	for _, r := range call {
		b, i := r.b, r.i
		m := b.msgs[i]
		switch {
		case l.draining.Load():
			b.releaseUnstarted(i)
		case !b.leaseHeld(i):
			// Its renewals failed while it waited: another consumer may
			// hold it now, so it is not run here.
			if b.state[i].CompareAndSwap(stFetched, stSettling) {
				b.lapsedInPool(i)
				b.state[i].Store(stDone)
			}
		case l.o.Poison != nil && m.DequeueCount > l.o.MaxDequeueCount && l.counted(m) > l.o.MaxDequeueCount:
			if b.state[i].CompareAndSwap(stFetched, stSettling) {
				b.poison(i, "dequeue count above the maximum before the run", nil)
				b.state[i].Store(stDone)
			}
		default:
			// Renewal reads the cancel only after it takes the message
			// from running, so it is set first.
			b.cancels[i] = cancelCall
			if b.state[i].CompareAndSwap(stFetched, stRunning) {
				runs = append(runs, r)
				ms = append(ms, m)
				continue
			}
			// Renewal found its lease lost while it waited.
		}
		tally.add(b, false)
	}
	if len(ms) == 0 {
		return
	}
	start := time.Now()
	hctx, span := l.traceCall(callContext(ctx, runs), runs, ms)
	res := handler.BatchResults(l.bh(hctx, ms), len(ms))
	l.ewma.add(time.Since(start))
	l.stats.calls.Add(1)
	l.logWholeCall(ms, res)
	for k, r := range runs {
		b, i, err := r.b, r.i, res[k]
		if err != nil {
			err = queue.RedactError(err)
		}
		switch {
		case b.settledInTx(i, err): // deleted in the handler's transaction (settle.go)
			tally.add(b, true)
			continue
		case err == nil && b.state[i].CompareAndSwap(stRunning, stSucceeded):
			tally.add(b, true)
			continue
		case err != nil && b.state[i].CompareAndSwap(stRunning, stSettling):
			if leaseLost.Load() && !handler.IsPermanent(err) {
				b.bystander(i, err)
			} else {
				b.failed(i, err)
			}
			b.state[i].Store(stDone)
		case err != nil:
			// Renewal took it (lease lost) and cancelled the call.
			l.stats.failed.Add(1)
			l.rememberFailure(b.msgs[i].ID, err)
		}
		tally.add(b, false)
	}
	l.traceCallEnd(span, runs, res)
}

// lapsedInPool settles a message whose lease ended, by the listener's
// clock, while it waited in the pool for a call (its renewals failed):
// another consumer may run it now, so it is neither run nor handed back
// here. It reappears, or has reappeared, with its dequeue count raised by
// the backend's refusals, not by a run of its own, which is excused here.
func (b *batch) lapsedInPool(i int) {
	l := b.l
	m := b.msgs[i]
	l.failures.excuse(m.ID)
	l.stats.leasesLost.Add(1)
	l.log.Warn("listener: the lease of a message waiting for a batch handler call ended (its renewals failed); it is not run here",
		zap.String("msg_id", m.ID), zap.Int("dequeue_count", m.DequeueCount))
}

// settleTally counts, per batch, the messages a call has finished with, so
// that each batch is settled once (its last settle deletes its successes
// in one call).
type settleTally struct {
	at    map[*batch]int
	bs    []*batch
	n, ok []int
}

func (t *settleTally) add(b *batch, ok bool) {
	k, seen := t.at[b]
	if !seen {
		if t.at == nil {
			t.at = map[*batch]int{}
		}
		k = len(t.bs)
		t.at[b] = k
		t.bs, t.n, t.ok = append(t.bs, b), append(t.n, 0), append(t.ok, 0)
	}
	t.n[k]++
	if ok {
		t.ok[k]++
	}
}

func (t *settleTally) settle() {
	for k, b := range t.bs {
		b.settle(t.n[k], t.ok[k])
	}
	t.at, t.bs, t.n, t.ok = nil, nil, nil, nil
}

// logWholeCall writes one line of the failure log for a call that failed
// as a whole (it panicked, or returned the wrong number of results), with
// the call's size, within the log's rate limit; each message's own line
// follows as for any failure. Every result is looked at: the first may be
// a message's own failure (a JSONBatch body that did not decode).
func (l *Listener) logWholeCall(ms []*queue.Message, res []error) {
	// Any result, not the first: JSONBatch gives a body that does not
	// decode its own error, and the call's failure to the others.
	var first error
	var pe *handler.PanicError
	panicked := false
	for _, err := range res {
		if p, ok := errors.AsType[*handler.PanicError](err); ok {
			first, pe, panicked = err, p, true
			break
		}
		if first == nil && errors.Is(err, handler.ErrBatchResults) {
			first = err
		}
	}
	if first == nil {
		return
	}
	ce := l.log.Check(zap.WarnLevel, "listener: batch handler call failed as a whole; each of its messages fails")
	if ce == nil || !l.failLog.allow() {
		return
	}
	fields := []zap.Field{zap.Int("call_size", len(ms)), zap.String("first_msg_id", ms[0].ID), zap.Error(queue.RedactError(first))}
	if panicked {
		fields = append(fields, zap.ByteString("stack", pe.Stack))
	}
	ce.Write(fields...)
}

// bystander settles a message whose batch call failed after the call was
// cancelled because another of its messages lost its lease: its failure
// is likely the cancellation's, not its own, so it is handed back at once
// and the run does not count towards its poisoning (as a worker fault's
// does not, without the gets' pause). A permanent failure is its own, and
// takes the usual path.
func (b *batch) bystander(i int, err error) {
	l := b.l
	m := b.msgs[i]
	l.stats.failed.Add(1)
	l.failures.excuse(m.ID)
	if ce := l.log.Check(zap.WarnLevel, "listener: batch call cancelled because another of its messages lost its lease; this message is handed back and the run does not count towards its poisoning"); ce != nil && l.failLog.allow() {
		ce.Write(failureFields(m, err, 0)...)
	}
	l.release(m.ID, b.newestReceipt(i))
}
