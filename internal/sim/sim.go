package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/bits"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/scaling"
)

// DefaultService is the handler's service time per message when none is
// given: 20 ms, a small computation or one call to a nearby service.
const DefaultService = 20 * time.Millisecond

// DefaultSeed seeds the jitter and the billing scenario when no seed is given.
const DefaultSeed = 2011 // the year of the Best Practices article

// queueName is the simulated queue's name.
const queueName = "simulated"

// Options configure a run. The zero value uses every default.
type Options struct {
	// Service is the handler's service time per message (DefaultService).
	// It must be below Visibility: the model has no visibility renewal.
	Service time.Duration
	// PricePer10k is the price of 10,000 calls in dollars
	// (meter.DefaultPricePer10k, the Best Practices article's $0.01).
	PricePer10k float64
	// Seed seeds each policy's jitter (DefaultSeed if 0).
	Seed int64
	// BatchDelete makes the backend delete a batch in one call, as the
	// embedded drivers do. By default it does not, as Azure Queue storage
	// does not: every message's delete is a billed call, which is what seed
	// 002's cost model counts.
	BatchDelete bool
	// Visibility is the visibility timeout of each get
	// (listener.DefaultVisibilityTimeout).
	Visibility time.Duration
	// Concurrency bounds the handlers running at once across the pool, as
	// listener.Options.Concurrency does; a task takes a batch's worth of
	// slots before it gets. 0: no bound, every task runs its whole batch
	// in parallel (the Best Practices article's PLINQ ForAll on enough cores).
	Concurrency int
	// OnResize, if set, is told of every change of a pool's size by its
	// agent: the policy, the virtual time since the start, the sizes.
	OnResize func(policy string, at time.Duration, from, to int)
	// WarmUp leaves the messages put in the run's first WarmUp out of P50
	// and P99 (MaxLatency still counts them): the pool starts at one task
	// and grows, and at a high rate the backlog of its first seconds would
	// otherwise be the p99 of a whole run (RunSweep sets it).
	WarmUp time.Duration
	// Downstream, if set, is the service every handler calls (see
	// Downstream): a call it refuses fails, and the message comes back
	// after its visibility timeout, or goes to the poison queue at
	// MaxDequeueCount (unless an adaptive policy excuses the refusal).
	Downstream *Downstream
	// MaxDequeueCount is the runs before poisoning with a Downstream
	// (listener.DefaultMaxDequeueCount).
	MaxDequeueCount int
}

// Downstream is a service with a capacity: it serves Capacity calls at
// once, each taking Options.Service, and refuses a call beyond them (an
// HTTP 503: handler.IsOverloaded), which also takes Options.Service (the
// caller learns of it when it would have had its answer). At each Change
// the capacity becomes the change's.
type Downstream struct {
	Capacity int
	Changes  []CapacityChange
}

// CapacityChange sets a Downstream's capacity from At (since the run's
// start) on.
type CapacityChange struct {
	At       time.Duration
	Capacity int
}

// capacity is the downstream's capacity at offset at.
func (d *Downstream) capacity(at time.Duration) int {
	c := d.Capacity
	for _, ch := range d.Changes {
		if at >= ch.At {
			c = ch.Capacity
		}
	}
	return c
}

func (o Options) withDefaults() Options {
	if o.Service == 0 {
		o.Service = DefaultService
	}
	if o.PricePer10k == 0 {
		o.PricePer10k = meter.DefaultPricePer10k
	}
	if o.Seed == 0 {
		o.Seed = DefaultSeed
	}
	if o.Visibility == 0 {
		o.Visibility = listener.DefaultVisibilityTimeout
	}
	if o.MaxDequeueCount == 0 {
		o.MaxDequeueCount = listener.DefaultMaxDequeueCount
	}
	return o
}

func (o Options) validate() error {
	switch {
	case o.Service < 0:
		return fmt.Errorf("sim: service: %s is negative", o.Service)
	case o.Visibility <= 0 || o.Visibility > queue.MaxVisibilityTimeout:
		return fmt.Errorf("sim: visibility: %s is outside (0, %s]", o.Visibility, queue.MaxVisibilityTimeout)
	case o.Service >= o.Visibility:
		return fmt.Errorf("sim: service: %s is not below the visibility timeout %s (the model does not renew visibility)", o.Service, o.Visibility)
	case o.PricePer10k < 0:
		return fmt.Errorf("sim: price: %v is negative", o.PricePer10k)
	case o.Concurrency < 0:
		return fmt.Errorf("sim: concurrency: %d is negative", o.Concurrency)
	case o.Downstream != nil && o.Downstream.Capacity < 1:
		return fmt.Errorf("sim: downstream capacity: %d is below 1", o.Downstream.Capacity)
	}
	return nil
}

// Run simulates w once for each policy, each on a fresh queue, and reports.
// It returns ctx's error if ctx ends first.
func Run(ctx context.Context, w Workload, policies []Policy, o Options) (Report, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return Report{}, err
	}
	if w.Days == 0 {
		w.Days = 1
	}
	if err := w.Validate(); err != nil {
		return Report{}, err
	}
	if len(policies) == 0 {
		return Report{}, errors.New("sim: no policies to run")
	}
	rep := Report{
		Workload: w.Name, Days: w.Days, Length: w.Length(), Messages: w.Messages(),
		Service: o.Service, PricePer10k: o.PricePer10k, Seed: o.Seed, BatchDelete: o.BatchDelete,
		Concurrency: o.Concurrency,
	}
	seen := map[string]bool{}
	for _, p := range policies {
		p = p.withDefaults()
		if err := p.validate(); err != nil {
			return Report{}, err
		}
		if seen[p.Name] {
			return Report{}, fmt.Errorf("sim: policy %q is given twice", p.Name)
		}
		seen[p.Name] = true
		res, err := runPolicy(ctx, w, p, o)
		if err != nil {
			return Report{}, err
		}
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

// vclock is the run's virtual time, moved by the event loop. It serves the
// memory driver (queue.Clock) and the agent (clock.Clock), which only ask
// the time: nothing in the model sleeps on a timer, since the event queue
// is the timer.
type vclock struct{ now time.Time }

func (c *vclock) Now() time.Time { return c.now }

func (c *vclock) NewTimer(time.Duration) clock.Timer {
	panic("sim: the virtual clock has no timers; the event queue schedules")
}

func (c *vclock) AfterFunc(time.Duration, func()) clock.Timer {
	panic("sim: the virtual clock has no timers; the event queue schedules")
}

// perMessageDeletes hides a driver's batch delete, so that the meter counts
// one call per deleted message, as Azure bills.
type perMessageDeletes struct{ driver.Queue }

func (p perMessageDeletes) Features() driver.Features {
	f := p.Queue.Features()
	f.BatchDelete = false
	return f
}

type evKind uint8

const (
	evArrive evKind = iota // the producer puts what is due
	evTask                 // a task runs its loop (after a sleep, a start or a wake)
	evDone                 // a batch's handlers finish
	evAgent                // the agent samples
)

type event struct {
	at    int64 // nanoseconds since the start
	kind  evKind
	gen   uint32
	task  *task
	batch *batch
}

// agenda orders events by (time, scheduling order): simultaneous events
// run in the order they were scheduled, which makes a run deterministic.
// Events at one instant share a bucket, and the instants are a min-heap,
// so that 200 pollers waking together cost one heap operation, not 200.
type agenda struct {
	times  []int64 // a min-heap of the instants that have buckets
	byTime map[int64]*bucket
	last   *bucket // the bucket of the latest schedule: consecutive ones often share it
	free   []*bucket
}

type bucket struct {
	at  int64
	evs []event
}

func (a *agenda) init() { a.byTime = map[int64]*bucket{} }

func (a *agenda) empty() bool { return len(a.times) == 0 }

// add schedules ev at ev.at, after everything already scheduled then.
func (a *agenda) add(ev event) {
	b := a.last
	if b == nil || b.at != ev.at {
		b = a.byTime[ev.at]
		if b == nil {
			if n := len(a.free); n > 0 {
				b, a.free = a.free[n-1], a.free[:n-1]
			} else {
				b = &bucket{}
			}
			b.at = ev.at
			a.byTime[ev.at] = b
			a.pushTime(ev.at)
		}
		a.last = b
	}
	b.evs = append(b.evs, ev)
}

// next removes the earliest instant from the heap and returns its bucket,
// which stays open for events scheduled at that instant while it runs;
// done closes it.
func (a *agenda) next() *bucket {
	return a.byTime[a.popTime()]
}

func (a *agenda) done(b *bucket) {
	delete(a.byTime, b.at)
	if a.last == b {
		a.last = nil
	}
	clear(b.evs)
	b.evs = b.evs[:0]
	a.free = append(a.free, b)
}

func (a *agenda) pushTime(t int64) {
	a.times = append(a.times, t)
	h := a.times
	for j := len(h) - 1; j > 0; {
		i := (j - 1) / 2
		if h[i] <= h[j] {
			break
		}
		h[i], h[j] = h[j], h[i]
		j = i
	}
}

func (a *agenda) popTime() int64 {
	h := a.times
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h) && h[l] < h[m] {
			m = l
		}
		if r < len(h) && h[r] < h[m] {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	a.times = h
	return top
}

type taskState uint8

const (
	taskReady     taskState = iota
	taskSleeping            // after an empty get, until its timer, a trigger or a resize
	taskWaitBatch           // more of its messages in flight than the new-batch threshold
	taskWaitSlots           // waiting for handler slots (Options.Concurrency)
	taskPacing              // waiting out Pace after a get that drained the queue
	taskStopped
)

// task is one dequeue task: the listener's task loop as a state machine.
type task struct {
	id       int
	state    taskState
	gen      uint32 // bumped to cancel a scheduled wake
	idle     int    // empty gets in a row
	inFlight int    // fetched messages not yet finished
	held     int    // handler slots granted while waiting
	slept    int64  // when its current sleep began
	wakeAt   int64  // when it is due to wake from it
	nextGet  int64  // after a partial get: the earliest next get (Policy.Pace)
}

// batch is the messages of one get, handled in parallel.
type batch struct {
	t     *task
	ms    []*queue.Message
	start int64
	// refused[i]: the downstream refused message i's call.
	refused []bool
}

// engine runs one policy over one workload.
type engine struct {
	ctx  context.Context
	p    Policy
	o    Options
	rng  *rand.Rand
	clk  *vclock
	now  int64
	end  int64
	plan agenda

	q        *queue.Queue // the consumer's calls, metered
	producer *queue.Queue // the producer's puts, metered apart
	m, pm    *meter.Meter
	arr      arrivals
	body     []byte

	tasks       []*task // tasks not yet stopped (and some stopped, pruned lazily)
	nextID      int
	active      int // tasks running (the listener's l.active)
	stopTokens  int // tasks asked to stop by Resize that have not yet
	free        int // handler slots free (Concurrency > 0)
	slotWaiters []*task

	agent        *scaling.Agent
	agentEvery   time.Duration
	agentAwake   bool
	agentPending bool

	latencies   []time.Duration
	doneLat     []time.Duration // put → the run that succeeded
	gate        *scaling.RateGate
	aimd        *scaling.AIMD
	used        int // slots taken under the adaptive limit
	dsBusy      int // calls the downstream serves
	poisoned    int64
	refused     int64
	limitSum    float64 // Σ limit × seconds, for the mean limit
	limitAt     int64
	warmMax     time.Duration // the longest pickup of a message put in the warm-up
	inFlight    int           // handlers running
	maxInFlight int
	inQueue     int64 // put and not yet deleted
	maxBacklog  int64
	deleted     int64
	peakTasks   int
	resizes     int
	workEdges   int64
	triggers    int64
	events      int64
}

// seedFor derives a policy's RNG stream from the run's seed and its name,
// so that its jitter does not depend on which other policies run.
func seedFor(seed int64, name string) (uint64, uint64) {
	h := fnv.New64a()
	h.Write([]byte(name))
	return uint64(seed), h.Sum64()
}

func runPolicy(ctx context.Context, w Workload, p Policy, o Options) (Result, error) {
	vc := &vclock{now: clock.Epoch}
	store := memory.NewStore(memory.WithClock(vc))
	e := &engine{
		ctx: ctx, p: p, o: o, clk: vc,
		end:  int64(w.Length()),
		m:    meter.New(o.PricePer10k),
		pm:   meter.New(o.PricePer10k),
		body: []byte("transaction"),
		arr:  arrivals{phases: w.Phases, jitter: w.Jitter, seed: uint64(o.Seed)},
	}
	e.rng = rand.New(rand.NewPCG(seedFor(o.Seed, p.Name)))
	copts := []queue.Option{queue.WithObserver(e.m)}
	if !o.BatchDelete {
		copts = append(copts, queue.WithWrapper(func(d driver.Queue) driver.Queue { return perMessageDeletes{d} }))
	}
	var err error
	if e.q, err = store.Queue(queueName, copts...); err != nil {
		return Result{}, fmt.Errorf("sim: %w", err)
	}
	if e.producer, err = store.Queue(queueName, queue.WithObserver(e.pm)); err != nil {
		return Result{}, fmt.Errorf("sim: %w", err)
	}
	if o.Concurrency > 0 {
		e.free = o.Concurrency
	}
	if p.RateLimit > 0 {
		burst := p.RateBurst
		if burst == 0 {
			burst = scaling.DefaultRateBurst(p.RateLimit, p.BatchSize)
		}
		if e.gate, err = scaling.NewRateGate(p.RateLimit, burst); err != nil {
			return Result{}, fmt.Errorf("sim: policy %q: %w", p.Name, err)
		}
	}
	if p.Adaptive != nil {
		a := *p.Adaptive
		if a.Max == 0 {
			a.Max = o.Concurrency
		}
		if e.aimd, err = scaling.NewAIMD(a); err != nil {
			return Result{}, fmt.Errorf("sim: policy %q: %w", p.Name, err)
		}
	}
	if p.Scaling != nil {
		e.agent = scaling.NewAgent(simPool{e}, p.Scaling(), scaling.AgentOptions{
			MinTasks: p.MinTasks, MaxTasks: p.MaxTasks,
			Interval: p.Agent.Interval, ShrinkAfter: p.Agent.ShrinkAfter,
			ShrinkWhenEmpty: p.Agent.ShrinkWhenEmpty,
			Clock:           vc,
		})
		e.agentEvery = e.agent.Options().Interval
	}
	e.plan.init()
	e.arr.init()
	if at, ok := e.arr.next(); ok {
		e.schedule(event{at: at, kind: evArrive})
	}
	for range p.Tasks {
		e.startTask()
	}
	if err := e.loop(); err != nil {
		return Result{}, err
	}
	return e.result(w), nil
}

func (e *engine) schedule(ev event) { e.plan.add(ev) }

func (e *engine) after(d time.Duration, ev event) {
	ev.at = e.now + int64(d)
	e.schedule(ev)
}

// loop runs events in time order until the workload's end.
func (e *engine) loop() error {
	for !e.plan.empty() {
		b := e.plan.next()
		if b.at >= e.end {
			break
		}
		e.now = b.at
		e.clk.now = clock.Epoch.Add(time.Duration(b.at))
		// Events scheduled for now while these run join the bucket.
		for i := 0; i < len(b.evs); i++ {
			if err := e.handle(b.evs[i]); err != nil {
				return err
			}
		}
		e.plan.done(b)
		if err := e.ctx.Err(); err != nil {
			return fmt.Errorf("sim: %w", err)
		}
	}
	return nil
}

// handle runs one event.
func (e *engine) handle(ev event) error {
	e.events++
	switch ev.kind {
	case evArrive:
		return e.arrive()
	case evTask:
		t := ev.task
		if t.state == taskStopped || ev.gen != t.gen {
			return nil // a wake cancelled by a trigger or a stop
		}
		t.state = taskReady
		if t.held > 0 {
			// Granted handler slots: the loop resumes at its get, as after
			// a semaphore's Acquire.
			more, err := e.fetch(t)
			if err != nil || !more {
				return err
			}
		}
		return e.run(t)
	case evDone:
		return e.done(ev.batch)
	case evAgent:
		e.sample()
	}
	return nil
}

// arrive puts every message due now and schedules the next arrival. With a
// trigger, the producer notifies: sleeping tasks wake and the agent hears
// of the work (listener.triggered).
func (e *engine) arrive() error {
	n := e.arr.take(e.now)
	for range n {
		if _, err := e.producer.Put(e.ctx, e.body, queue.PutOptions{TTL: queue.NoExpiry}); err != nil {
			return fmt.Errorf("sim: put: %w", err)
		}
	}
	e.inQueue += int64(n)
	e.maxBacklog = max(e.maxBacklog, e.inQueue)
	if at, ok := e.arr.next(); ok {
		e.schedule(event{at: at, kind: evArrive})
	}
	if e.p.Trigger && n > 0 {
		e.triggers++
		e.wakeAll()
		e.workDetected()
	}
	return nil
}

// startTask starts one task, which gets at once.
func (e *engine) startTask() {
	e.nextID++
	t := &task{id: e.nextID}
	if len(e.tasks) > 2*e.active+64 {
		e.prune()
	}
	e.tasks = append(e.tasks, t)
	e.active++
	e.peakTasks = max(e.peakTasks, e.active-e.stopTokens)
	e.schedule(event{at: e.now, kind: evTask, task: t, gen: t.gen})
}

func (e *engine) stop(t *task) {
	t.state = taskStopped
	t.gen++
	e.active--
	if t.held > 0 {
		held := t.held
		t.held = 0
		e.release(held)
	}
}

// takeStopToken is the listener's: a task asked to stop by Resize does.
func (e *engine) takeStopToken(t *task) bool {
	if e.stopTokens == 0 {
		return false
	}
	e.stopTokens--
	e.stop(t)
	return true
}

// tryIdleStop is the listener's: a QueueEmpty stop is refused if it would
// leave fewer than MinTasks.
func (e *engine) tryIdleStop(t *task) bool {
	if e.active-e.stopTokens <= e.p.MinTasks {
		return false
	}
	e.stop(t)
	return true
}

func (e *engine) activeTasks() int { return e.active - e.stopTokens }

// run is the listener's task loop from its top: stop if asked, wait while
// too many of its messages are in flight, then fetch.
func (e *engine) run(t *task) error {
	for {
		if e.takeStopToken(t) {
			return nil
		}
		if t.inFlight > e.p.NewBatchThreshold {
			t.state = taskWaitBatch
			return nil
		}
		if e.paced(t) {
			return nil
		}
		more, err := e.fetch(t)
		if err != nil || !more {
			return err
		}
	}
}

// paced is the listener's pace: after a get that drained the queue the
// task waits until Pace after it (neither a trigger nor anything else but
// a resize ends the wait); it reports whether the task now waits.
func (e *engine) paced(t *task) bool {
	at := t.nextGet
	t.nextGet = 0
	if at <= e.now {
		return false
	}
	t.state = taskPacing
	t.gen++
	e.schedule(event{at: at, kind: evTask, task: t, gen: t.gen})
	return true
}

// fetch takes handler slots, gets, and dispatches the batch or sleeps; it
// reports whether the loop goes on at once.
func (e *engine) fetch(t *task) (bool, error) {
	want := e.p.BatchSize
	if e.aimd != nil {
		if t.held == 0 {
			limit := e.aimd.Limit()
			need := max(1, min(limit, want)/2)
			if limit-e.used < need || len(e.slotWaiters) > 0 {
				t.state = taskWaitSlots
				e.slotWaiters = append(e.slotWaiters, t)
				return false, nil
			}
			t.held = min(want, limit-e.used)
			e.used += t.held
		}
		want = t.held
	} else if e.o.Concurrency > 0 {
		want = min(want, e.o.Concurrency)
		if t.held == 0 {
			if e.free < want || len(e.slotWaiters) > 0 {
				t.state = taskWaitSlots
				e.slotWaiters = append(e.slotWaiters, t)
				return false, nil
			}
			e.free -= want
			t.held = want
		}
	}
	if e.gate != nil {
		n, wait := e.gate.Admit(e.clk.now, want, want)
		if n == 0 {
			// The listener's admit: hand the slots back, wait for the
			// tokens (a resize may stop the task meanwhile), try again.
			held := t.held
			t.held = 0
			e.release(held)
			t.state = taskPacing
			t.gen++
			e.after(wait, event{kind: evTask, task: t, gen: t.gen})
			return false, nil
		}
		if held := t.held; held > n {
			t.held = n
			e.release(held - n)
		}
		want = n
	}
	ms, err := e.q.Get(e.ctx, want, e.o.Visibility)
	if err != nil {
		return false, fmt.Errorf("sim: get: %w", err)
	}
	if e.gate != nil {
		e.gate.Commit(e.clk.now, want, len(ms))
	}
	if e.o.Concurrency > 0 || e.aimd != nil {
		e.release(t.held - len(ms))
		t.held = 0
	}
	if len(ms) == 0 {
		t.idle++
		delay, stop := e.queueEmpty(t.idle)
		if stop && e.tryIdleStop(t) {
			return false, nil
		}
		t.state = taskSleeping
		t.gen++
		t.slept, t.wakeAt = e.now, e.now+int64(delay)
		e.after(delay, event{kind: evTask, task: t, gen: t.gen})
		return false, nil
	}
	if e.p.Pace > 0 && len(ms) < want {
		t.nextGet = e.now + int64(e.p.Pace)
	}
	if t.idle > 0 {
		t.idle = 0
		e.workEdges++
		e.workDetected()
	}
	now := e.clk.now
	b := &batch{t: t, ms: ms, start: e.now}
	if ds := e.o.Downstream; ds != nil {
		b.refused = make([]bool, len(ms))
		c := ds.capacity(time.Duration(e.now))
		for i := range ms {
			if e.dsBusy < c {
				e.dsBusy++
			} else {
				b.refused[i] = true
			}
		}
	}
	for _, m := range ms {
		if m.DequeueCount != 1 {
			continue // a redelivery: its pickup was counted at its first
		}
		if m.InsertedAt.Sub(clock.Epoch) < e.o.WarmUp {
			e.warmMax = max(e.warmMax, now.Sub(m.InsertedAt))
			continue
		}
		e.latencies = append(e.latencies, now.Sub(m.InsertedAt))
	}
	t.inFlight += len(ms)
	e.inFlight += len(ms)
	e.maxInFlight = max(e.maxInFlight, e.inFlight)
	e.after(e.o.Service, event{kind: evDone, batch: b})
	return true, nil
}

// queueEmpty is the QueueEmpty hook the policy's listener would have: a
// fixed sleep (the two-step dequeue post), or the Best Practices article's backoff with a seeded jitter and,
// with a trigger, up to the safety interval; stopping by the Best Practices article's rule.
func (e *engine) queueEmpty(k int) (time.Duration, bool) {
	if e.p.FixedPoll > 0 {
		return e.p.FixedPoll, false
	}
	jitter := scaling.JitterMin + e.rng.Float64()*(scaling.JitterMax-scaling.JitterMin)
	long := e.p.Idle
	if e.p.Trigger {
		long.Max = e.p.SafetyInterval
	}
	d := long.DelayWith(k, jitter)
	return d, e.p.Stop && e.p.Idle.ShouldStop(d, e.activeTasks())
}

// done finishes a batch: its messages are deleted (one call each, or one
// DeleteBatch), their slots freed, and its task fetches again if it was
// waiting at the threshold.
func (e *engine) done(b *batch) error {
	ok, poisoned := 0, 0
	all := b.ms
	if b.refused != nil || e.aimd != nil {
		all, poisoned = e.judge(b)
	}
	if e.p.CoalesceDeletes {
		rs := make([]queue.Receipt, len(all))
		for i, m := range all {
			rs[i] = queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt}
		}
		res, err := e.q.DeleteBatch(e.ctx, rs)
		if err != nil {
			return fmt.Errorf("sim: delete batch: %w", err)
		}
		for _, r := range res {
			if r == nil {
				ok++
			}
		}
	} else {
		for _, m := range all {
			if err := e.q.Delete(e.ctx, m.ID, m.PopReceipt); err == nil {
				ok++
			}
		}
	}
	e.inQueue -= int64(ok)
	ok -= poisoned
	e.poisoned += int64(poisoned)
	e.deleted += int64(ok)
	t := b.t
	t.inFlight -= len(b.ms)
	e.inFlight -= len(b.ms)
	e.release(len(b.ms))
	if t.state == taskWaitBatch && t.inFlight <= e.p.NewBatchThreshold {
		t.state = taskReady
		if e.paced(t) {
			return nil
		}
		more, err := e.fetch(t)
		if err != nil || !more {
			return err
		}
		return e.run(t)
	}
	return nil
}

// release frees n handler slots and grants them to waiting tasks in order,
// as a weighted semaphore does.
func (e *engine) release(n int) {
	if e.aimd != nil {
		e.used -= max(n, 0)
		e.grantAdaptive()
		return
	}
	if e.o.Concurrency <= 0 || n <= 0 {
		return
	}
	e.free += n
	want := min(e.p.BatchSize, e.o.Concurrency)
	for len(e.slotWaiters) > 0 && e.free >= want {
		t := e.slotWaiters[0]
		e.slotWaiters = e.slotWaiters[1:]
		if t.state != taskWaitSlots {
			continue
		}
		e.free -= want
		t.held = want
		t.state = taskReady
		t.gen++
		e.schedule(event{at: e.now, kind: evTask, task: t, gen: t.gen})
	}
}

// prune drops stopped tasks from e.tasks.
func (e *engine) prune() {
	live := e.tasks[:0]
	for _, t := range e.tasks {
		if t.state != taskStopped {
			live = append(live, t)
		}
	}
	clear(e.tasks[len(live):])
	e.tasks = live
}

// wakeAll is Listener.Wake: every sleeping task gets at once.
func (e *engine) wakeAll() {
	e.prune()
	for _, t := range e.tasks {
		if t.state == taskSleeping {
			at := max(e.now, t.slept+int64(e.p.TriggerFloor))
			if at >= t.wakeAt {
				continue // already due to wake by then
			}
			t.gen++
			t.wakeAt = at
			e.schedule(event{at: at, kind: evTask, task: t, gen: t.gen})
		}
	}
}

// resize is Listener.Resize: start tasks, or ask the surplus to stop;
// sleeping tasks take the stop requests at once, the others at the top of
// their loop.
func (e *engine) resize(n int) {
	n = scaling.Clamp(n, e.p.MinTasks, e.p.MaxTasks)
	cur := e.activeTasks()
	switch {
	case n > cur:
		add := n - cur
		w := min(add, e.stopTokens)
		e.stopTokens -= w
		for range add - w {
			e.startTask()
		}
	case n < cur:
		e.stopTokens += cur - n
		for i := len(e.tasks) - 1; i >= 0 && e.stopTokens > 0; i-- {
			if t := e.tasks[i]; t.state == taskSleeping || t.state == taskPacing {
				e.takeStopToken(t)
			}
		}
	}
	if n != cur {
		e.resizes++
		if e.o.OnResize != nil {
			e.o.OnResize(e.p.Name, time.Duration(e.now), cur, n)
		}
	}
	e.peakTasks = max(e.peakTasks, e.activeTasks())
}

// workDetected is the listener's WorkDetected hook wired to the agent's,
// which wakes it at once if it sleeps; signals while it is busy merge.
func (e *engine) workDetected() {
	if e.agent == nil {
		return
	}
	if !e.agentAwake {
		e.agentAwake = true
		e.schedule(event{at: e.now, kind: evAgent})
		return
	}
	e.agentPending = true
}

// sample is one turn of Agent.Run's busy loop: a Step, then the next in
// Interval while the queue holds work; a signal that came while it slept
// starts it again at once.
func (e *engine) sample() {
	if e.agent.Step(e.ctx) {
		e.agentPending = false
		e.after(e.agentEvery, event{kind: evAgent})
		return
	}
	e.agentAwake = false
	if e.agentPending {
		e.agentPending = false
		e.agentAwake = true
		e.schedule(event{at: e.now, kind: evAgent})
	}
}

// simPool is the engine seen by the agent as a scaling.Pool.
type simPool struct{ e *engine }

func (p simPool) Depth(ctx context.Context) (int, error) { return p.e.q.Count(ctx) }
func (p simPool) ActiveTasks() int                       { return p.e.activeTasks() }
func (p simPool) Resize(n int)                           { p.e.resize(n) }
func (p simPool) Drained() int64                         { return p.e.deleted }

func (e *engine) result(w Workload) Result {
	s := e.m.Snapshot()
	days := float64(max(w.Days, 1))
	monthCalls := int64(float64(s.Total())*(meter.HoursPerMonth/24)/days + 0.5)
	r := Result{
		Policy:      e.p.Name,
		About:       e.p.About,
		Calls:       s.Total(),
		IdleCalls:   s.Calls[meter.GetEmpty],
		ByKind:      s.Map(),
		MonthlyCost: meter.CostOf(monthCalls, s.PricePer10k),
		Puts:        e.pm.Snapshot().Calls[meter.Put],
		Processed:   e.deleted,
		Left:        e.inQueue,
		MaxBacklog:  e.maxBacklog,
		MaxInFlight: e.maxInFlight,
		PeakTasks:   e.peakTasks,
		EndTasks:    e.activeTasks(),
		Resizes:     e.resizes,
		WorkEdges:   e.workEdges,
		Triggers:    e.triggers,
		Events:      e.events,
	}
	r.Poisoned, r.Refused = e.poisoned, e.refused
	if e.aimd != nil {
		e.trackLimit()
		if e.now > 0 {
			r.MeanLimit = e.limitSum / float64(e.now)
		}
		r.EndLimit = e.aimd.Limit()
	}
	if n := len(e.doneLat); n > 0 {
		slices.Sort(e.doneLat)
		r.P99Done = percentile(e.doneLat, 99)
	}
	e.doneLat = nil
	if n := len(e.latencies); n > 0 {
		slices.Sort(e.latencies)
		r.P50 = percentile(e.latencies, 50)
		r.P99 = percentile(e.latencies, 99)
		r.MaxLatency = e.latencies[n-1]
	}
	r.MaxLatency = max(r.MaxLatency, e.warmMax)
	e.latencies = nil
	return r
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []time.Duration, p int) time.Duration {
	n := len(sorted)
	i := (n*p + 99) / 100 // ceil(n·p/100)
	return sorted[max(i, 1)-1]
}

// arrivals walks a workload's phases in time order.
type arrivals struct {
	phases []Phase
	i      int    // the current phase
	start  int64  // its start, nanoseconds since the run's
	burst  bool   // its burst is still to come
	k, n   int64  // its next steady arrival, and how many it has
	jitter bool   // Workload.Jitter
	seed   uint64 // of the jitter
}

func (a *arrivals) init() { a.enter() }

// enter sets up phase a.i.
func (a *arrivals) enter() {
	if a.i >= len(a.phases) {
		return
	}
	p := a.phases[a.i]
	a.burst = p.Burst > 0
	a.k, a.n = 0, p.steady()
}

// next is the time of the next arrival, if any.
func (a *arrivals) next() (int64, bool) {
	for a.i < len(a.phases) {
		if a.burst {
			return a.start, true
		}
		if a.k < a.n {
			d := a.phases[a.i].Duration
			at := spread(a.k, a.n, d)
			if a.jitter {
				// A fixed fraction of the slot for each (phase, k): next
				// must give the same time every time it is asked.
				slot := spread(a.k+1, a.n, d) - at
				u := splitmix(a.seed ^ uint64(a.i)<<48 ^ uint64(a.k))
				at += int64(float64(slot) * float64(u>>11) / (1 << 53))
			}
			return a.start + at, true
		}
		a.start += int64(a.phases[a.i].Duration)
		a.i++
		a.enter()
	}
	return 0, false
}

// take consumes the arrivals due at exactly at and returns their number.
func (a *arrivals) take(at int64) int {
	n := 0
	for {
		t, ok := a.next()
		if !ok || t != at {
			return n
		}
		if a.burst {
			n += a.phases[a.i].Burst
			a.burst = false
		} else {
			n++
			a.k++
		}
	}
}

// spread is the offset of the k-th of n arrivals evenly spaced over d:
// floor(k·d/n), in 128-bit arithmetic so that a day of arrivals cannot
// overflow.
func spread(k, n int64, d time.Duration) int64 {
	hi, lo := bits.Mul64(uint64(k), uint64(d))
	q, _ := bits.Div64(hi, lo, uint64(n))
	return int64(q)
}

// splitmix is SplitMix64's finalizer: a well-mixed 64-bit hash of x.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// judge settles a batch's calls to the downstream: each refused one is an
// overload signal (and, without an adaptive limit, counts towards its
// message's poisoning: at MaxDequeueCount it goes to the poison queue);
// each served one a success. It returns the messages to delete (the
// successes, then the poisoned) and how many were poisoned; a refused
// message that is not poisoned is left to reappear after its visibility
// timeout, as the listener leaves it (RetryDelay's default for a 503
// without Retry-After).
func (e *engine) judge(b *batch) (del []*queue.Message, poisoned int) {
	now := e.clk.now
	start := clock.Epoch.Add(time.Duration(b.start))
	var bad []*queue.Message
	for i, m := range b.ms {
		oc := scaling.Succeeded
		if b.refused == nil {
			del = append(del, m) // no downstream: every call succeeds
		} else if b.refused[i] {
			oc = scaling.Overloaded
			e.refused++
			if e.aimd == nil && m.DequeueCount >= e.o.MaxDequeueCount {
				bad = append(bad, m)
			}
		} else {
			e.dsBusy--
			del = append(del, m)
			if m.InsertedAt.Sub(clock.Epoch) >= e.o.WarmUp {
				e.doneLat = append(e.doneLat, now.Sub(m.InsertedAt))
			}
		}
		if e.aimd != nil {
			e.trackLimit()
			e.aimd.Observe(start, now.Sub(start), oc, e.inFlight, now)
		}
	}
	if e.aimd != nil {
		e.grantAdaptive()
	}
	return append(del, bad...), len(bad)
}

// trackLimit integrates the adaptive limit over time, for its mean.
func (e *engine) trackLimit() {
	e.limitSum += float64(e.aimd.Limit()) * float64(e.now-e.limitAt)
	e.limitAt = e.now
}

// grantAdaptive grants waiting tasks their slots, in order, while the
// adaptive limit leaves max(1, min(limit, batch)/2) free: the listener's
// take.
func (e *engine) grantAdaptive() {
	for len(e.slotWaiters) > 0 {
		t := e.slotWaiters[0]
		if t.state != taskWaitSlots {
			e.slotWaiters = e.slotWaiters[1:]
			continue
		}
		limit := e.aimd.Limit()
		if limit-e.used < max(1, min(limit, e.p.BatchSize)/2) {
			return
		}
		e.slotWaiters = e.slotWaiters[1:]
		t.held = min(e.p.BatchSize, limit-e.used)
		e.used += t.held
		t.state = taskReady
		t.gen++
		e.schedule(event{at: e.now, kind: evTask, task: t, gen: t.gen})
	}
}
