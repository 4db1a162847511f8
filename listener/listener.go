package listener

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
)

// ErrRunning is returned by Start and Run on a listener that is already
// running.
var ErrRunning = errors.New("listener: already running")

// Listener is the Best Practices article's multi-threaded queue listener: a pool of dequeue
// tasks feeding one handler func. Create it with New, run it with Run (or
// Start and Wait), and resize the pool with Resize while it runs.
type Listener struct {
	q *queue.Queue
	h handler.Func
	// bh and pool, for a batch handler (NewBatch; h is nil), run its
	// calls (see batchcall.go).
	bh   handler.BatchFunc
	pool *pool
	o    Options
	log  *zap.Logger
	sem  *slots // handler slots, adaptive limit, rate limit (flow.go)
	// busyPool is the pool a default listener grows to while gets come
	// back full (growBusy); 0 or 1: it does not grow. Resize sets it to
	// 0: a pool resized is the caller's.
	busyPool atomic.Int32

	// Lifecycle and pool size, guarded by mu.
	mu         sync.Mutex
	running    bool
	stopping   bool
	group      *errgroup.Group
	runCtx     context.Context
	active     int // tasks running
	stopTokens int // tasks asked to stop that have not yet
	nextTaskID int
	resizeCh   chan struct{} // closed and replaced to tell sleeping tasks of a resize

	wakeMu sync.Mutex
	wakeCh chan struct{} // closed and replaced by Wake

	// Handlers and batches outlive the tasks that fetched them; wg owns
	// them. Their context ends only when the grace period does.
	wg            sync.WaitGroup
	handlerCtx    context.Context
	handlerCancel context.CancelFunc
	// abortCtx is the parent of handler contexts started from now on: a
	// child of handlerCtx that Abort cancels and replaces.
	abortCtx    atomic.Pointer[context.Context]
	abortCancel context.CancelFunc // guarded by mu
	// graceTimer and opsTimer end handlerCtx and opCtx after shutdown
	// begins; guarded by mu.
	graceTimer, opsTimer clock.Timer
	// opCtx carries deletes, releases and renewals: shutdown does not
	// cancel it, but it ends DefaultDeleteTimeout after the grace period,
	// so a hung backend cannot hold Run open forever.
	opCtx    context.Context
	opCancel context.CancelFunc
	draining atomic.Bool
	fatal    atomic.Pointer[error]

	totalTasks atomic.Int64
	idleTasks  atomic.Int32
	pacing     atomic.Int32 // tasks waiting out the cadence after a partial get
	// parked counts tasks blocked on a timer of the clock (sleep, pace),
	// once the timer exists: the test kit's sign that a task waits for
	// virtual time (see internal/kithook).
	parked atomic.Int32
	// held counts messages a runner keeps through a worker fault's pause
	// (see batch.waitFaultPause), or a batch handler's pool keeps until a
	// call takes them, and heldBatches the open batches that have any:
	// like parked tasks, they wait for the clock.
	held, heldBatches atomic.Int64
	// busy mirrors wg: open batches (until their deletes are done) and
	// flushes, the work of the listener that no task's loop does.
	busy     atomic.Int64
	inFlight atomic.Int64
	// liveContexts counts handler contexts not yet cancelled (see
	// handlerContext).
	liveContexts atomic.Int64
	ewma         ewma
	stats        counters
	failures     lastFailures // last errors of failed messages, for their poisoning
	failLog      failureLog   // rate-limited failure lines
	// pause is the gets' pause after a handler failed for want of the
	// worker's resources (see pauseGets).
	pause pause
	// tracer follows each message (nil: none; see trace.go).
	tracer Tracer
}

// New returns a listener that feeds messages of q to h. It validates the
// options and names the first bad field.
func New(q *queue.Queue, h handler.Func, o Options) (*Listener, error) {
	if q == nil {
		return nil, errors.New("listener: queue is nil")
	}
	if h == nil {
		return nil, fmt.Errorf("listener: handler for queue %q is nil", q.Name())
	}
	if o.BatchMax != 0 || o.BatchWait != 0 {
		return nil, fmt.Errorf("listener: batch_handler is set but the handler of queue %q handles one message: use NewBatch", q.Name())
	}
	return newListener(q, o, false, func(l *Listener) { l.h = handler.Chain(h, handler.Recover()) })
}

// newListener makes the listener New and NewBatch return (batch: the
// latter); set installs the handler.
func newListener(q *queue.Queue, o Options, batch bool, set func(*Listener)) (*Listener, error) {
	// A pool left to its default grows while gets come back full, up to
	// what the backend serves faster in parallel (see growBusy).
	busy := 0
	if o.Tasks == 0 {
		busy = q.Features().BusyTasks
	}
	o.fitLatency(q.Features().Billed)
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("%w (queue %q)", err, q.Name())
	}
	o.fitBatch(q.Features().MaxBatch)
	so := o
	if batch {
		// A batch handler's Concurrency counts calls; its tasks' slots
		// count the messages the calls and the one filling may hold.
		so.Concurrency = o.slots(true)
	}
	sem, err := newSlots(&so)
	if batch {
		o.RateLimit = so.RateLimit
	} else {
		o = so
	}
	if err != nil {
		return nil, fmt.Errorf("%w (queue %q)", err, q.Name())
	}
	if q.Features().ServerPoison {
		// The backend moves poison messages itself (an SQS queue with a
		// RedrivePolicy): its rule wins, and the listener moves none.
		o.Poison = nil
	}
	if o.QueueEmpty == nil {
		idle := o.Idle
		long := idle
		if o.Notifier != nil {
			// Triggered: sleep up to the safety interval, stop at the usual
			// maximum (the Best Practices article's modified QueueEmpty handler).
			long.Max = o.SafetyInterval
		}
		o.QueueEmpty = func(l *Listener, k int) (time.Duration, bool) {
			d := long.Delay(k)
			return d, d >= idle.Max && l.ActiveTasks() > 1
		}
	}
	l := &Listener{
		q:        q,
		o:        o,
		log:      o.Logger.With(zap.String("queue", q.Name())),
		sem:      sem,
		resizeCh: make(chan struct{}),
		wakeCh:   make(chan struct{}),
		tracer:   tracerFor(o, q),
	}
	l.busyPool.Store(int32(min(busy, o.MaxTasks)))
	set(l)
	if sem.aimd != nil {
		l.h = handler.Chain(l.h, l.observeFlow)
	}
	l.failLog = failureLog{log: l.log, clock: o.Clock, lines: o.FailureLogLines, interval: o.FailureLogInterval}
	l.ewma.init()
	return l, nil
}

// Queue returns the queue the listener reads.
func (l *Listener) Queue() *queue.Queue { return l.q }

// Options returns the options in effect, defaults filled in.
func (l *Listener) Options() Options { return l.o }

// Run starts Options.Tasks dequeue tasks and blocks until ctx ends and
// everything the listener started has ended: tasks stop fetching at once,
// fetched messages not yet started are released to other consumers,
// running handlers get the shutdown grace period, and deletes after
// success complete. It returns nil after a normal shutdown.
func (l *Listener) Run(ctx context.Context) error {
	if err := l.Start(ctx, l.o.Tasks); err != nil {
		return err
	}
	return l.Wait()
}

// Start starts n dequeue tasks (the Best Practices article's StartListener(threadCount)) and
// returns. The listener runs until ctx ends; Wait waits for that.
func (l *Listener) Start(ctx context.Context, n int) error {
	if n < 1 || n > l.o.MaxTasks {
		return fmt.Errorf("listener: tasks: %d is outside 1..max_tasks %d", n, l.o.MaxTasks)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running {
		return ErrRunning
	}
	l.running, l.stopping = true, false
	l.active, l.stopTokens = 0, 0
	l.draining.Store(false)
	l.fatal.Store(nil)
	g, gctx := errgroup.WithContext(ctx)
	l.group, l.runCtx = g, gctx
	l.handlerCtx, l.handlerCancel = context.WithCancel(context.WithoutCancel(ctx))
	l.opCtx, l.opCancel = context.WithCancel(context.WithoutCancel(ctx))
	l.newAbortContextLocked()
	// The watcher holds the group open until shutdown begins, so that
	// Resize may add tasks while the pool is momentarily empty.
	g.Go(func() error {
		<-gctx.Done()
		l.beginDrain()
		return nil
	})
	for i := 0; i < n; i++ {
		l.startTaskLocked()
	}
	if l.o.Notifier != nil {
		signals, unsubscribe := l.o.Notifier.Subscribe(l.q.Name())
		g.Go(func() error {
			defer unsubscribe()
			for {
				select {
				case <-gctx.Done():
					return nil
				case <-signals:
					l.triggered()
				}
			}
		})
	}
	return nil
}

// triggered handles a push trigger: sleeping tasks get at once, and
// WorkDetected lets a scaling agent size the pool before they even have.
func (l *Listener) triggered() {
	l.stats.triggers.Add(1)
	l.Wake()
	if l.o.WorkDetected != nil {
		l.o.WorkDetected(l)
	}
}

// Wait blocks until the listener started by Start has shut down, and
// returns the first fatal error, if any. Start may then run it again.
func (l *Listener) Wait() error {
	l.mu.Lock()
	g := l.group
	l.mu.Unlock()
	if g == nil {
		return nil
	}
	err := g.Wait() // tasks: no batch starts after this
	l.wg.Wait()     // batches: handlers, deletes, releases
	l.mu.Lock()
	for _, t := range []clock.Timer{l.graceTimer, l.opsTimer} {
		if t != nil {
			t.Stop()
		}
	}
	l.graceTimer, l.opsTimer = nil, nil
	l.endPause()
	l.abortCancel()
	l.handlerCancel()
	l.opCancel()
	l.running, l.group = false, nil
	l.active, l.stopTokens = 0, 0
	l.mu.Unlock()
	l.failLog.flush()
	if p := l.fatal.Load(); p != nil {
		return *p
	}
	return err
}

// beginDrain runs when the run's context ends: no task fetches again, and
// handlers still running when the grace period ends are cancelled. Wait
// stops the timers if everything ends sooner.
func (l *Listener) beginDrain() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopping = true
	l.draining.Store(true)
	l.graceTimer = l.o.Clock.AfterFunc(l.o.ShutdownGrace, l.handlerCancel)
	l.opsTimer = l.o.Clock.AfterFunc(l.o.ShutdownGrace+DefaultDeleteTimeout, l.opCancel)
	if l.pool != nil {
		// Messages waiting for a batch handler call are handed back now.
		l.wg.Go(l.pool.drain)
	}
	l.log.Debug("listener: draining", zap.Duration("grace", l.o.ShutdownGrace))
}

// startTaskLocked starts one task. l.mu is held.
func (l *Listener) startTaskLocked() {
	l.active++
	l.nextTaskID++
	id := l.nextTaskID
	l.totalTasks.Add(1)
	ctx := l.runCtx
	l.group.Go(func() error { return l.taskMain(ctx, id) })
}

// growBusy starts one more task after a get that came back full, while a
// pool left to its default (Options.Tasks 0) runs fewer than the driver's
// Features().BusyTasks: on a backend whose concurrent gets overlap their
// round trips and share their commits, one task waiting on each get in
// turn drains at a fraction of the backend's rate. The tasks it adds stop
// by the idle rule (QueueEmpty) once the queue is drained, down to
// MinTasks. A pending stop request (Resize asked for fewer) wins, and a
// pool once resized (by a scaling agent) is not grown again.
func (l *Listener) growBusy() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.running || l.stopping || l.stopTokens > 0 || l.active >= int(l.busyPool.Load()) {
		return
	}
	l.startTaskLocked()
	l.log.Debug("listener: busy, task added", zap.Int("tasks", l.active))
}

// Resize makes the pool n tasks, clamped to [MinTasks, MaxTasks]: it starts
// tasks, or asks the surplus to stop after their current get. It does
// nothing when the listener is not running. A listener left to its
// default pool (Options.Tasks 0) no longer grows it after a Resize: the
// pool is the caller's from then on.
func (l *Listener) Resize(n int) {
	if n < l.o.MinTasks {
		n = l.o.MinTasks
	}
	if n > l.o.MaxTasks {
		n = l.o.MaxTasks
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.running || l.stopping {
		return
	}
	l.busyPool.Store(0)
	cur := l.active - l.stopTokens
	switch {
	case n > cur:
		// Withdraw stop requests first: those tasks are still running.
		add := n - cur
		w := min(add, l.stopTokens)
		l.stopTokens -= w
		for i := 0; i < add-w; i++ {
			l.startTaskLocked()
		}
	case n < cur:
		l.stopTokens += cur - n
		close(l.resizeCh)
		l.resizeCh = make(chan struct{})
	}
	if n != cur {
		l.log.Debug("listener: resized", zap.Int("from", cur), zap.Int("to", n))
	}
}

// takeStopToken reports whether the calling task should stop because
// Resize asked for fewer tasks; if so the task is no longer counted.
func (l *Listener) takeStopToken() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopTokens == 0 {
		return false
	}
	l.stopTokens--
	l.active--
	return true
}

// tryIdleStop grants a QueueEmpty stop request unless it would leave fewer
// than MinTasks; if granted the task is no longer counted.
func (l *Listener) tryIdleStop() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.active-l.stopTokens <= l.o.MinTasks {
		return false
	}
	l.active--
	return true
}

// taskEnded uncounts a task that stopped for another reason (shutdown).
// A stop request still pending is fulfilled by it, so that stop requests
// never outnumber the tasks (ActiveTasks never goes below zero) and none
// survives into the next run.
func (l *Listener) taskEnded() {
	l.mu.Lock()
	l.active--
	if l.stopTokens > 0 {
		l.stopTokens--
	}
	l.mu.Unlock()
}

// Wake interrupts the sleep of every idle task, which then gets at once:
// how a push trigger cuts the polling delay.
func (l *Listener) Wake() {
	l.wakeMu.Lock()
	close(l.wakeCh)
	l.wakeCh = make(chan struct{})
	l.wakeMu.Unlock()
}

func (l *Listener) wakeChan() <-chan struct{} {
	l.wakeMu.Lock()
	defer l.wakeMu.Unlock()
	return l.wakeCh
}

func (l *Listener) resizeChan() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.resizeCh
}

// ActiveTasks is the number of dequeue tasks running, not counting those
// asked to stop.
func (l *Listener) ActiveTasks() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.active - l.stopTokens
}

// Depth is the queue's approximate message count: one billed Count call.
func (l *Listener) Depth(ctx context.Context) (int, error) { return l.q.Count(ctx) }

// State is the Best Practices article's QueryState, with more: the queue's depth and the
// listener's counters.
type State struct {
	// Depth is the queue's approximate count, visible and hidden.
	Depth int
	// ActiveTasks are running now; TotalTasks were ever started; IdleTasks
	// are sleeping after an empty get (or pausing after a handler failed
	// for want of the worker's resources).
	ActiveTasks, TotalTasks, IdleTasks int
	// InFlight is the number of fetched messages not yet finished.
	InFlight int
	// HandlerTime is the moving average of one handler call.
	HandlerTime time.Duration
	Stats
}

// Stats are the listener's counters since New.
type Stats struct {
	// Processed handler calls returned nil; Failed returned an error
	// (Panics of them panicked). With a batch handler they count
	// messages by their own outcome, and Calls counts the calls.
	Processed, Failed, Panics int64
	Calls                     int64
	// Deleted messages; ReceiptMismatches and NotFound are deletes that
	// found the message taken by another consumer or gone (expected).
	Deleted, ReceiptMismatches, NotFound int64
	// DeleteErrors are deletes that failed otherwise; the message will
	// reappear and run again.
	DeleteErrors int64
	// GetErrors counts failed gets, TransientErrors the retryable ones.
	GetErrors, TransientErrors int64
	// EmptyGets counts gets that found nothing.
	EmptyGets int64
	// Released messages were handed back unstarted at shutdown; Renewed
	// counts visibility extensions of held messages; Hidden counts failed
	// messages hidden by RetryDelay, and those that can never be poisoned
	// (an imitation of a poison envelope) hidden for the longest a hide
	// may last; they stay in the queue (not Poisoned, not Drained).
	Released, Renewed, Hidden int64
	// WorkDetected counts idle→busy edges.
	WorkDetected int64
	// Triggers counts push-trigger signals received.
	Triggers int64
	// Poisoned messages moved to the poison queue; LeasesLost counts
	// renewals that found the message taken or gone (the handler's context
	// was cancelled), and messages held for a worker fault whose lease
	// ended during the pause (not run again here).
	Poisoned, LeasesLost int64
	// WorkerFaults counts failures for want of the worker's own resources
	// (handler.IsWorkerFault): those messages run again in place when the
	// gets' pause ends (handed back if the run stops or is aborted first),
	// not counted towards their poisoning. Failed counts them too.
	WorkerFaults int64
	// LastGet is when a get last succeeded (empty or not), LastGetError
	// when one last failed and LastGetErr its error, by the listener's
	// clock; zero before the first. Readiness compares them.
	LastGet, LastGetError time.Time
	LastGetErr            error
	// LastGetFailed says the newest get to finish failed. Readiness reads
	// it rather than comparing LastGet with LastGetError, which a wall
	// clock stepping back would order wrongly.
	LastGetFailed bool
	// PickupLatency sums, over the PickedUp messages, the time from a
	// message's put (its InsertedAt) to the get that fetched it. Only first
	// deliveries (DequeueCount 1) count: for a redelivery the end of its
	// previous visibility timeout is not known, and the time since the put
	// would count the failed runs. A put with an initial visibility delay
	// counts the delay too; a backend clock ahead of the worker's counts 0.
	PickupLatency time.Duration
	PickedUp      int64
}

type counters struct {
	processed, failed, panics                   atomic.Int64
	deleted, mismatches, notFound, deleteErrors atomic.Int64
	getErrors, transientErrors, emptyGets       atomic.Int64
	released, renewed, hidden, workDetected     atomic.Int64
	poisoned, leasesLost, workerFaults          atomic.Int64
	triggers, calls                             atomic.Int64
	// lastGet and lastGetError are Unix nanoseconds of the listener's
	// clock (0: never); lastGetErr is the newest get error.
	lastGet, lastGetError atomic.Int64
	lastGetErr            atomic.Pointer[error]
	lastGetFailed         atomic.Bool
	pickupNanos, pickedUp atomic.Int64
}

func unixNanos(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Stats reads the counters without calling the queue.
func (l *Listener) Stats() Stats {
	c := &l.stats
	s := Stats{
		Processed: c.processed.Load(), Failed: c.failed.Load(), Panics: c.panics.Load(),
		Deleted: c.deleted.Load(), ReceiptMismatches: c.mismatches.Load(), NotFound: c.notFound.Load(),
		DeleteErrors: c.deleteErrors.Load(),
		GetErrors:    c.getErrors.Load(), TransientErrors: c.transientErrors.Load(), EmptyGets: c.emptyGets.Load(),
		Released: c.released.Load(), Renewed: c.renewed.Load(), Hidden: c.hidden.Load(),
		WorkDetected: c.workDetected.Load(),
		Poisoned:     c.poisoned.Load(), LeasesLost: c.leasesLost.Load(), Triggers: c.triggers.Load(),
		LastGet: unixNanos(c.lastGet.Load()), LastGetError: unixNanos(c.lastGetError.Load()),
		PickupLatency: time.Duration(c.pickupNanos.Load()), PickedUp: c.pickedUp.Load(),
		LastGetFailed: c.lastGetFailed.Load(), WorkerFaults: c.workerFaults.Load(),
		Calls: c.calls.Load(),
	}
	if p := c.lastGetErr.Load(); p != nil {
		s.LastGetErr = *p
	}
	return s
}

// State reads the listener's state and the queue's depth (one billed
// Count call).
func (l *Listener) State(ctx context.Context) (State, error) {
	s := l.localState()
	d, err := l.q.Count(ctx)
	if err != nil {
		return s, fmt.Errorf("listener: state of %q: %w", l.q.Name(), err)
	}
	s.Depth = d
	return s, nil
}

// LocalState reads the listener's state without calling the queue: Depth
// is 0. Metrics read it at every scrape.
func (l *Listener) LocalState() State { return l.localState() }

func (l *Listener) localState() State {
	l.mu.Lock()
	active := l.active - l.stopTokens
	l.mu.Unlock()
	return State{
		ActiveTasks: active,
		TotalTasks:  int(l.totalTasks.Load()),
		IdleTasks:   int(l.idleTasks.Load()),
		InFlight:    int(l.inFlight.Load()),
		HandlerTime: l.ewma.get(),
		Stats:       l.Stats(),
	}
}

// setFatal records an error that ends the listener.
func (l *Listener) setFatal(err error) {
	l.fatal.CompareAndSwap(nil, &err)
}

// sleepReason says why an idle sleep ended.
type sleepReason int

const (
	sleptFull sleepReason = iota
	sleepWoken
	sleepCancelled
	sleepStop
)

// sleep waits d, ending early for shutdown, for a Resize that asks this
// task to stop, and, if wake is not nil, for the Wake that closes it. The
// task takes wake (wakeChan) before the get whose answer it sleeps on, so
// that a trigger while the get is on its way is not lost.
func (l *Listener) sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) sleepReason {
	if d <= 0 {
		return sleptFull
	}
	fired, unpark := l.park(d)
	defer unpark()
	for {
		resize := l.resizeChan()
		select {
		case <-fired:
			return sleptFull
		case <-ctx.Done():
			return sleepCancelled
		case <-wake:
			return sleepWoken
		case <-resize:
			if l.takeStopToken() {
				return sleepStop
			}
		}
	}
}

// park starts a timer of d for a task that is about to block on it, and
// counts the task parked until the timer fires or the task calls unpark
// (it woke otherwise, or is done). The timer's callback unparks the task
// before it closes fired, on the clock's goroutine: a test in virtual time
// that moves a fake clock (which tracks its callbacks until they return)
// never sees a woken task as still parked.
func (l *Listener) park(d time.Duration) (fired <-chan struct{}, unpark func()) {
	ch := make(chan struct{})
	var done atomic.Bool
	leave := func() {
		if done.CompareAndSwap(false, true) {
			l.parked.Add(-1)
		}
	}
	t := l.o.Clock.AfterFunc(d, func() {
		leave()
		close(ch)
	})
	l.parked.Add(1)
	return ch, func() {
		t.Stop()
		leave()
	}
}

func (l *Listener) park1()   { l.parked.Add(1) }
func (l *Listener) unpark1() { l.parked.Add(-1) }

// ewma is a moving average of handler durations in nanoseconds, updated
// without locks; -1 until the first sample.
type ewma struct{ bits atomic.Int64 }

const ewmaAlpha = 0.2

func (e *ewma) init() { e.bits.Store(-1) }

func (e *ewma) add(d time.Duration) {
	for {
		old := e.bits.Load()
		var v int64
		if old < 0 {
			v = int64(d)
		} else {
			v = old + int64(ewmaAlpha*float64(int64(d)-old))
		}
		if e.bits.CompareAndSwap(old, v) {
			return
		}
	}
}

func (e *ewma) get() time.Duration {
	v := e.bits.Load()
	if v < 0 {
		return 0
	}
	return time.Duration(v)
}

func (e *ewma) known() (time.Duration, bool) {
	v := e.bits.Load()
	return time.Duration(v), v >= 0
}

// Drained is the number of messages that have left the queue through this
// listener: deleted after success or moved to the poison queue. A scaling
// policy divides its growth by time and tasks to learn the drain rate.
func (l *Listener) Drained() int64 {
	return l.stats.deleted.Load() + l.stats.poisoned.Load()
}

// Abort cancels the context of every handler running at this moment,
// without waiting for the shutdown grace; their messages are settled as
// failures. Handlers started after it get live contexts: Abort does not
// stop the listener (end the run's context for that).
func (l *Listener) Abort() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.abortCancel == nil {
		return
	}
	cancel := l.abortCancel
	l.newAbortContextLocked()
	cancel()
}

// newAbortContextLocked makes a fresh parent for the handler contexts
// started from now on. l.mu is held.
func (l *Listener) newAbortContextLocked() {
	ctx, cancel := context.WithCancel(l.handlerCtx)
	l.abortCtx.Store(&ctx)
	l.abortCancel = cancel
}

// handlerContext is a context for the handlers of one runner: a child of
// the current abort context, so Abort and the end of the grace period
// cancel it, and renewal may cancel it alone when a lease is lost. It
// carries the runner's TxSettler (see runnerCtx).
//
// liveContexts counts the handler contexts made and not yet cancelled by
// their owner, so that a test can see none is forgotten.
func (l *Listener) handlerContext() (*runnerCtx, context.CancelFunc) {
	ctx, cancel := context.WithCancel(*l.abortCtx.Load())
	l.liveContexts.Add(1)
	var done atomic.Bool
	return &runnerCtx{Context: ctx}, func() {
		if done.CompareAndSwap(false, true) {
			l.liveContexts.Add(-1)
		}
		cancel()
	}
}
