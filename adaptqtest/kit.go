package adaptqtest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/internal/kithook"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
)

const (
	// SettleLimit is the most virtual time one Settle runs: a day longer
	// than a message's default time-to-live (queue.DefaultTTL, Azure's 7
	// days), so that every message put with the default lives out its life.
	SettleLimit = queue.DefaultTTL + 24*time.Hour
	// HangGuard is the most real time the kit waits for a handler to
	// return, or for the worker to come to rest, before it gives up with an
	// error: handlers run in real time, and one that waits for the kit's
	// clock (a sleep on it, a deadline from it) never returns.
	HangGuard = 30 * time.Second
)

// quietRounds is how many looks in a row, a scheduler yield apart, must
// find the worker at rest and unchanged before the kit moves the clock: a
// goroutine a timer just woke runs within one yield on the same thread.
const quietRounds = 3

// Kit runs a worker, or one listener, on queues of its own memory store,
// on a virtual clock that moves only when the test calls Settle or
// Advance. A Kit is driven by one goroutine (the test's); Close it when
// done.
type Kit struct {
	clock *clock.Fake
	store *memory.Store
	id    string
	rec   *recorder

	worker    *adaptq.Worker
	names     []string // the queues listened to, in config order
	listeners map[string]*listener.Listener
	cancel    context.CancelFunc
	done      chan error
	closed    bool
}

func newKit() *Kit {
	c := clock.NewFake(clock.Epoch)
	k := &Kit{
		clock:     c,
		store:     memory.NewStore(memory.WithClock(c)),
		id:        "k" + strconv.FormatUint(kitSeq.Add(1), 10),
		rec:       newRecorder(c),
		listeners: map[string]*listener.Listener{},
		done:      make(chan error, 1),
	}
	kits.Store(k.id, k)
	return k
}

// driver opens the named queue of the kit's store, seen by its recorder.
func (k *Kit) driver(name string) (driver.Queue, error) {
	d, err := k.store.Driver(name)
	if err != nil {
		return nil, err
	}
	return &kitQueue{Queue: d, rec: k.rec}, nil
}

// NewListener runs one listener of h on the kit's queue called name, with
// o (its poison queue, unless o.Poison is set, is name + "-poison"; its
// clock is the kit's). It returns once the listener's tasks have made
// their first get and wait.
func NewListener(name string, h handler.Func, o listener.Options) (*Kit, error) {
	if h == nil {
		return nil, fmt.Errorf("adaptqtest: NewListener(%q): handler is nil", name)
	}
	k := newKit()
	q, err := k.Queue(name)
	if err != nil {
		k.forget()
		return nil, err
	}
	if o.Poison == nil {
		if o.Poison, err = q.Sibling(context.Background(), name+adaptq.PoisonSuffix); err != nil {
			k.forget()
			return nil, err
		}
	}
	o.Clock = k.clock
	l, err := listener.New(q, handler.Chain(h, k.rec.middleware), o)
	if err != nil {
		k.forget()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := l.Start(ctx, l.Options().Tasks); err != nil {
		cancel()
		k.forget()
		return nil, err
	}
	k.cancel, k.names, k.listeners[name] = cancel, []string{name}, l
	go func() { k.done <- l.Wait() }()
	if err := k.quiesce(); err != nil {
		_ = k.Close()
		return nil, err
	}
	return k, nil
}

// NewWorker runs an adaptq.Worker for cfg, every queue of which must have
// a memory:// URL (LoadConfig swaps a production config's URLs for them),
// with handlers registered by name and opts (adaptq.WithMiddleware …). The
// kit swaps each memory://NAME for its own queue NAME, turns the admin
// endpoint off and the log to nothing (unless opts give adaptq.WithLogger),
// and runs the worker's listeners, scaling agents and samplers on its
// clock. It returns the worker's start-up error, if any (a handler that is
// not registered, a config that does not validate), or the kit once every
// listener has made its first get and waits.
func NewWorker(cfg adaptq.Config, handlers map[string]handler.Func, opts ...adaptq.Option) (*Kit, error) {
	k := newKit()
	cfg.Admin.Address = ""
	cfg.Queues = append([]adaptq.QueueConfig(nil), cfg.Queues...)
	for i := range cfg.Queues {
		qc := &cfg.Queues[i]
		name, err := memoryName(qc.URL)
		if err != nil {
			k.forget()
			return nil, fmt.Errorf("adaptqtest: queues[%d].url: %w", i, err)
		}
		if qc.Name != "" {
			name = qc.Name
		}
		qc.URL = Scheme + "://" + k.id + "/" + name
		k.names = append(k.names, name)
	}
	all := append([]adaptq.Option{
		kithook.WorkerClock(k.clock).(adaptq.Option),
		adaptq.WithLogger(zap.NewNop()),
		adaptq.WithMiddleware(k.rec.middleware),
	}, opts...)
	w, err := adaptq.New(cfg, all...)
	if err != nil {
		k.forget()
		return nil, err
	}
	names := make([]string, 0, len(handlers))
	for n := range handlers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := w.Handle(n, handlers[n]); err != nil {
			k.forget()
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	k.worker, k.cancel = w, cancel
	ready := w.Ready()
	go func() { k.done <- w.Run(ctx) }()
	select {
	case <-ready:
	case err := <-k.done:
		cancel()
		k.forget()
		return nil, err
	}
	for _, n := range k.names {
		if l, ok := w.Listener(n); ok {
			k.listeners[n] = l
		}
	}
	// Ready comes once the listeners are started on their own goroutines,
	// which may not have started their tasks yet.
	if err := k.await(func() bool {
		for _, l := range k.listeners {
			if l.ActiveTasks() == 0 {
				return false
			}
		}
		return true
	}); err != nil {
		_ = k.Close()
		return nil, err
	}
	if err := k.quiesce(); err != nil {
		_ = k.Close()
		return nil, err
	}
	return k, nil
}

// memoryName is the queue name of a memory:// URL.
func memoryName(rawURL string) (string, error) {
	if !strings.HasPrefix(rawURL, "memory:") {
		return "", fmt.Errorf("%q is not a memory:// queue (load a production config with adaptqtest.LoadConfig, which swaps its URLs)", queue.Redact(rawURL))
	}
	return queueName(rawURL)
}

// forget drops a kit that never ran from the registry of open kits.
func (k *Kit) forget() { kits.Delete(k.id) }

// Worker is the worker NewWorker runs (nil for NewListener's kit), for
// its stats and its poison tools.
func (k *Kit) Worker() *adaptq.Worker { return k.worker }

// Listener is the listener of the named queue, for its Stats; nil if the
// kit listens to no such queue.
func (k *Kit) Listener(queueName string) *listener.Listener { return k.listeners[queueName] }

// Queue returns a handle on the kit's queue called name (created on first
// use), as a producer holds one: pass it to the code under test that puts.
func (k *Kit) Queue(name string) (*queue.Queue, error) {
	d, err := k.driver(name)
	if err != nil {
		return nil, fmt.Errorf("adaptqtest: %w", err)
	}
	return queue.New(d), nil
}

// Put puts body to the kit's queue called name, visible at once with the
// default time-to-live, and returns the message's id. It panics if the
// name is not a valid queue name or the body is too large: mistakes of
// the test itself. Queue(name).Put takes options.
func (k *Kit) Put(name string, body []byte) string {
	q, err := k.Queue(name)
	if err == nil {
		var id string
		if id, err = q.Put(context.Background(), body, queue.PutOptions{}); err == nil {
			return id
		}
	}
	panic(err)
}

// LoseDeletes loses the next n deletes that follow a successful run: the
// message stays and runs again once its visibility timeout ends, as after
// a worker that crashed between its handler and the delete. A handler
// that is not idempotent shows it.
func (k *Kit) LoseDeletes(n int) {
	k.rec.mu.Lock()
	k.rec.lose = n
	k.rec.mu.Unlock()
}

// Epoch is where every kit's clock starts: 2026-01-01 00:00 UTC.
var Epoch = clock.Epoch

// Now is the kit's virtual time (Epoch when the kit starts).
func (k *Kit) Now() time.Time { return k.clock.Now() }

// Settle runs the worker in virtual time until every message of the
// queues it listens to is settled: deleted, poisoned or expired. Time
// moves timer by timer while messages wait to be got; while none does
// (every one is hidden: a visibility timeout, a retry delay, Retry-After)
// it moves straight to when the first shows again, firing the idle
// tasks' timers on the way: a one-hour backoff costs no more than a
// short one, and a hidden message is got the moment it shows. Settle returns an error
// naming the messages still unsettled after SettleLimit of virtual time,
// or if a handler runs for HangGuard of real time.
func (k *Kit) Settle() error { return k.run(k.clock.Now().Add(SettleLimit), true) }

// Advance moves the kit's clock d forward, the worker acting on the way
// as in Settle, and returns at exactly d later with the worker at rest.
func (k *Kit) Advance(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("adaptqtest: Advance(%s): negative", d)
	}
	return k.run(k.clock.Now().Add(d), false)
}

// census is what the queues listened to hold now.
type census struct {
	unsettled, visible int
	nextVisible        time.Time // the soonest a hidden message shows; zero if none
	sample             []Message // a few unsettled messages, for an error
}

func (k *Kit) census(withSample bool) census {
	var c census
	now := k.clock.Now()
	for _, name := range k.names {
		for _, m := range k.store.Inspect(name) {
			c.unsettled++
			if !m.NextVisibleAt.After(now) {
				c.visible++
			} else if c.nextVisible.IsZero() || m.NextVisibleAt.Before(c.nextVisible) {
				c.nextVisible = m.NextVisibleAt
			}
			if withSample && len(c.sample) < 5 {
				c.sample = append(c.sample, k.Message(m.ID))
			}
		}
	}
	return c
}

// maxSteps bounds the clock's moves in one Settle or Advance: far more
// than a week of idle backoff needs.
const maxSteps = 1 << 20

// run moves the clock towards target, letting the worker come to rest at
// every step; with settle it stops once nothing is left to settle.
func (k *Kit) run(target time.Time, settle bool) error {
	if k.closed {
		return errors.New("adaptqtest: the kit is closed")
	}
	stalls := 0
	for step := 0; ; step++ {
		if err := k.quiesce(); err != nil {
			return err
		}
		now := k.clock.Now()
		c := k.census(false)
		if settle && c.unsettled == 0 {
			return nil
		}
		if !now.Before(target) || step == maxSteps {
			if !settle && step < maxSteps {
				return nil
			}
			c = k.census(true)
			var b strings.Builder
			if step == maxSteps {
				fmt.Fprintf(&b, "adaptqtest: gave up after %d moves of the clock, at %s; %d messages unsettled", maxSteps, now.Format(time.RFC3339Nano), c.unsettled)
			} else {
				fmt.Fprintf(&b, "adaptqtest: %d messages unsettled after %s of virtual time", c.unsettled, SettleLimit)
			}
			for _, m := range c.sample {
				fmt.Fprintf(&b, "\n\t%v", m)
			}
			return errors.New(b.String())
		}
		if c.visible > 0 && !k.anyTask() {
			return fmt.Errorf("adaptqtest: %d messages wait, but no listener task runs (the worker stopped?)", c.visible)
		}
		next, ok := k.clock.NextDeadline()
		if c.visible > 0 && !ok {
			// Messages wait and tasks run, but no timer is pending: a task
			// has not parked yet. Look again.
			if stalls++; stalls > maxSteps {
				return k.hung()
			}
			runtime.Gosched()
			continue
		}
		stalls = 0
		to := target
		if c.visible == 0 && !k.holding() {
			// Nothing to get until a hidden message shows: skip the idle
			// polls on the way there.
			if !c.nextVisible.IsZero() && c.nextVisible.Before(to) {
				to = c.nextVisible
			}
		} else if next.Before(to) {
			to = next
		}
		k.clock.Set(to)
	}
}

// holding reports whether a listener holds a message through a worker
// fault's pause. Its lease is renewed, and it runs again, on timers of the
// clock: jumping to the time a hidden message shows would skip them, show
// the held message to the tasks, and run it twice.
func (k *Kit) holding() bool {
	for _, l := range k.listeners {
		if l == nil {
			continue
		}
		if _, _, held := kithook.Activity(l); held > 0 {
			return true
		}
	}
	return false
}

// anyTask reports whether some listener has a task running.
func (k *Kit) anyTask() bool {
	for _, l := range k.listeners {
		if l.ActiveTasks() > 0 {
			return true
		}
	}
	return false
}

// quiesce waits, in real time, until the worker is at rest: no handler
// and no queue call running, every listener task parked on a timer of the
// kit's clock with nothing in flight, and nothing changing over
// quietRounds looks. Only then may the clock move.
func (k *Kit) quiesce() error {
	var last uint64
	stable := 0
	var start time.Time
	for spins := 0; ; spins++ {
		fp, quiet := k.observe()
		if quiet && fp == last {
			if stable++; stable >= quietRounds {
				return nil
			}
		} else {
			stable = 0
		}
		last = fp
		if spins < 64 {
			runtime.Gosched()
			continue
		}
		// Something runs in real time (a handler): wait for it without
		// spinning.
		if start.IsZero() {
			start = time.Now()
		} else if time.Since(start) > HangGuard {
			return k.hung()
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// await waits, in real time, until cond holds.
func (k *Kit) await(cond func() bool) error {
	var start time.Time
	for spins := 0; !cond(); spins++ {
		if spins < 64 {
			runtime.Gosched()
			continue
		}
		if start.IsZero() {
			start = time.Now()
		} else if time.Since(start) > HangGuard {
			return k.hung()
		}
		time.Sleep(50 * time.Microsecond)
	}
	return nil
}

// observe is a fingerprint of the worker's activity, and whether it is at
// rest.
func (k *Kit) observe() (uint64, bool) {
	h := uint64(14695981039346656037)
	mix := func(vs ...int64) {
		for _, v := range vs {
			h ^= uint64(v)
			h *= 1099511628211
		}
	}
	// A timer's callback, or a goroutine a timer woke, may not have run:
	// the clock's own counts say so.
	woken := k.clock.Running() + k.clock.Unreceived()
	quiet := k.rec.running.Load() == 0 && woken == 0
	mix(int64(k.rec.events.Load()), int64(k.clock.Pending()), int64(woken))
	if d, ok := k.clock.NextDeadline(); ok {
		mix(d.UnixNano())
	}
	for _, n := range k.names {
		l := k.listeners[n]
		if l == nil {
			continue
		}
		st := l.LocalState()
		parked, busy, held := kithook.Activity(l)
		if st.InFlight != held || busy != 0 || parked != st.ActiveTasks {
			quiet = false
		}
		mix(int64(st.ActiveTasks), int64(parked), int64(busy), int64(held), int64(st.InFlight), int64(st.TotalTasks), int64(st.IdleTasks),
			st.EmptyGets, st.Processed, st.Failed, st.Deleted, st.Poisoned, st.Triggers, st.WorkDetected, st.Released, st.Hidden)
	}
	return h, quiet
}

// hung is the error of a worker that did not come to rest.
func (k *Kit) hung() error {
	running := k.rec.running.Load()
	var b strings.Builder
	fmt.Fprintf(&b, "adaptqtest: the worker did not come to rest within %s of real time (%d handler runs or queue calls under way)", HangGuard, running)
	for _, n := range k.names {
		if l := k.listeners[n]; l != nil {
			st := l.LocalState()
			parked, busy, held := kithook.Activity(l)
			fmt.Fprintf(&b, "; queue %q: %d tasks, %d parked, %d messages in flight (%d held for a worker fault's pause), %d batches open", n, st.ActiveTasks, parked, st.InFlight, held, busy)
		}
	}
	b.WriteString(": a handler that waits for the kit's clock never returns, since the clock moves only between runs")
	return errors.New(b.String())
}

// Close stops the worker (or listener), waits for it, and returns its
// error. The kit's queues are gone with it.
func (k *Kit) Close() error {
	if k.closed {
		return nil
	}
	k.closed = true
	defer k.forget()
	k.cancel()
	// Shutdown gives running handlers a grace period on the kit's clock:
	// move it on until the run has ended.
	var start time.Time
	for spins := 0; ; spins++ {
		select {
		case err := <-k.done:
			return err
		default:
		}
		if spins < 64 {
			runtime.Gosched()
			continue
		}
		if start.IsZero() {
			start = time.Now()
		} else if time.Since(start) > HangGuard {
			return k.hung()
		}
		time.Sleep(50 * time.Microsecond)
		k.clock.AdvanceToNext()
	}
}
