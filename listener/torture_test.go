package listener_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/scaling"
)

// The torture test drives random schedules: a listener on a memory queue
// behind fault and latency injection, handlers that are fast, slow, fail,
// panic, fail permanently or outlive their visibility timeout, and a
// driver that resizes, aborts, wakes, stops and restarts the listener and
// puts more messages meanwhile. After each schedule it checks what must
// hold whatever happened (see tortureRun.check). The listener runs on the
// wall clock, as in production, so that the races are real; no check is
// about speed, and the only time bound is a generous one that tells a hang
// from a slow machine.
//
//	go test -run TestTorture ./listener/ -args -torture.duration=10m
//	go test -run TestTorture ./listener/ -args -torture.seed=N   # replay one schedule
//
// A seed replays the schedule (options, handler outcomes, driver actions),
// not the goroutine interleaving, so a rare failure may need a few runs.
var (
	tortureDuration = flag.Duration("torture.duration", 20*time.Second, "how long TestTorture runs schedules")
	tortureSeed     = flag.Uint64("torture.seed", 0, "run only the TestTorture schedule with this seed")
)

// maxTortureTasks is every schedule's MaxTasks.
const maxTortureTasks = 8

// waitBound is how long Wait may take beyond the shutdown grace before the
// run counts as hung: far more than a busy machine needs.
const waitBound = 20 * time.Second

func TestTorture(t *testing.T) {
	if *tortureSeed != 0 {
		runTorture(t, *tortureSeed)
		return
	}
	var sum listener.Stats
	var stolen int
	d := *tortureDuration
	if testing.Short() {
		d = min(d, 3*time.Second)
	}
	end := time.Now().Add(d)
	base := uint64(time.Now().UnixNano())
	n := 0
	for time.Now().Before(end) && !t.Failed() {
		st, st2 := runTorture(t, base+uint64(n))
		stolen += st2
		n++
		sum.Processed += st.Processed
		sum.Failed += st.Failed
		sum.Panics += st.Panics
		sum.Deleted += st.Deleted
		sum.Poisoned += st.Poisoned
		sum.Released += st.Released
		sum.Renewed += st.Renewed
		sum.LeasesLost += st.LeasesLost
		sum.Hidden += st.Hidden
		sum.ReceiptMismatches += st.ReceiptMismatches
		sum.GetErrors += st.GetErrors
	}
	t.Logf("%d schedules in %s; in all: %d processed, %d failed (%d panics), %d deleted, %d poisoned, %d released, %d hidden, %d renewals, %d leases lost, %d stale deletes, %d failed gets, %d messages got by the competing consumer",
		n, d, sum.Processed, sum.Failed, sum.Panics, sum.Deleted, sum.Poisoned, sum.Released, sum.Hidden, sum.Renewed, sum.LeasesLost, sum.ReceiptMismatches, sum.GetErrors, stolen)
}

// tortureRun is one schedule and what it observed.
type tortureRun struct {
	t    *testing.T
	seed uint64
	rng  *rand.Rand
	q    *tortureQueue
	raw  *queue.Queue // the queue without faults
	lq   *queue.Queue // the queue the listener reads, through q
	pois *queue.Queue
	l    *listener.Listener
	o    listener.Options
	// tasks is the current run's Start; resized is set once the pool was
	// resized (it is the caller's from then on); noResize: the schedule
	// never resizes, so that the busy growth alone sizes the pool.
	tasks    atomic.Int32
	resized  atomic.Bool
	noResize bool

	mu      sync.Mutex
	bodies  []string                // every body put
	idOf    map[string]string       // body → message id
	running map[string]map[int]bool // body → generations whose handler runs
	ran     map[string]bool         // "body/generation" → ran once
	fails   []string
}

func (r *tortureRun) failf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.fails) < 20 {
		r.fails = append(r.fails, fmt.Sprintf(format, args...))
	}
}

// outcome is what the handler does with generation g of body, 0..99:
// decided by the seed, so a replay does the same.
func (r *tortureRun) outcome(body string, g int) int {
	return rand.New(rand.NewPCG(r.seed^hashString(body), uint64(g))).IntN(100)
}

func hashString(s string) uint64 {
	var h uint64 = 1469598103934665603
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

func (r *tortureRun) handle(ctx context.Context, m *queue.Message) error {
	body, g := string(m.Body), m.DequeueCount
	key := fmt.Sprintf("%s/%d", body, g)
	r.mu.Lock()
	if r.ran[key] {
		r.fails = append(r.fails, fmt.Sprintf("%s (generation %d) ran twice", body, g))
	}
	r.ran[key] = true
	if r.running[body] == nil {
		r.running[body] = map[int]bool{}
	}
	r.running[body][g] = true
	r.mu.Unlock()
	r.checkTasks()
	if r.q.wasReleased(m.ID, g) {
		r.failf("%s (generation %d) started after it was released", body, g)
	}
	defer func() {
		if r.q.wasReleased(m.ID, g) {
			r.failf("%s (generation %d) was released while its handler ran", body, g)
		}
		r.mu.Lock()
		delete(r.running[body], g)
		r.mu.Unlock()
	}()
	sleep := func(d time.Duration, honour bool) error {
		if !honour {
			time.Sleep(d)
			return nil
		}
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	x := r.outcome(body, g)
	early := g < 3 // failures only on the first runs, so every message can end
	switch {
	case x < 50:
		return nil
	case x < 62:
		return sleep(time.Duration(x-49)*time.Millisecond, false)
	case x < 72:
		return sleep(time.Duration(x-61)*4*time.Millisecond, true)
	case x < 80 && early:
		return errors.New("injected handler error")
	case x < 85 && early:
		panic("injected handler panic")
	case x < 87 && early:
		// The downstream says it is overloaded: under an adaptive limit
		// the delivery is excused from poisoning and cuts the limit.
		return handler.Overloaded(errors.New("injected overload"))
	case x < 89:
		return handler.Permanent(errors.New("injected permanent failure"))
	case x < 94:
		// Outlives its visibility timeout: only renewal keeps it.
		return sleep(r.o.VisibilityTimeout*time.Duration(x-88)/4, true)
	}
	return nil
}

// handleBatch is the batch handler: each message's outcome is handle's,
// all of them at once, and a panic of any fails the whole call.
func (r *tortureRun) handleBatch(ctx context.Context, ms []*queue.Message) []error {
	res := make([]error, len(ms))
	panicked := make([]any, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() {
			defer func() { panicked[i] = recover() }()
			res[i] = r.handle(ctx, m)
		})
	}
	wg.Wait()
	for _, p := range panicked {
		if p != nil {
			panic(p)
		}
	}
	return res
}

// runTorture runs one schedule; it returns the listener's counters and
// how many messages the competing consumer got.
func runTorture(t *testing.T, seed uint64) (listener.Stats, int) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	rng := rand.New(rand.NewPCG(seed, 1))
	store := memory.NewStore()
	raw, err := store.Queue("torture")
	if err != nil {
		t.Fatal(err)
	}
	pois, err := store.Queue("torture-poison")
	if err != nil {
		t.Fatal(err)
	}
	r := &tortureRun{t: t, seed: seed, rng: rng, raw: raw, pois: pois,
		running: map[string]map[int]bool{}, ran: map[string]bool{}, idOf: map[string]string{}}
	r.q = newTortureQueue(nil, seed, []float64{0, 0.02, 0.1}[rng.IntN(3)],
		[]time.Duration{0, time.Millisecond, 5 * time.Millisecond}[rng.IntN(3)])
	// A third of the schedules leave the pool to its default on a backend
	// that reports BusyTasks (PostgreSQL's growth while gets come back
	// full), at times above MaxTasks (its own generator, so that a seed's
	// other choices stay what they were). The queue reads the driver's
	// features once, as it is made.
	grng := rand.New(rand.NewPCG(seed, 3))
	defaultPool := grng.IntN(3) == 0
	if defaultPool {
		r.q.busy = 2 + grng.IntN(2*maxTortureTasks)
		r.noResize = grng.IntN(2) == 0
	}
	if r.lq, err = store.Queue("torture", queue.WithWrapper(func(d driver.Queue) driver.Queue { r.q.Queue = d; return r.q })); err != nil {
		t.Fatal(err)
	}
	batch := 1 + rng.IntN(queue.MaxBatchSize)
	o := listener.Options{
		BatchSize:           batch,
		VisibilityTimeout:   time.Duration(100+rng.IntN(500)) * time.Millisecond,
		Concurrency:         1 + rng.IntN(3*batch),
		NewBatchThreshold:   rng.IntN(batch) - rng.IntN(2), // -1 (wait for all) .. batch-1
		Tasks:               1 + rng.IntN(4),
		MaxTasks:            maxTortureTasks,
		Idle:                scaling.IdleBackoff{Min: time.Millisecond, Max: 20 * time.Millisecond},
		ShutdownGrace:       time.Duration(rng.IntN(200)) * time.Millisecond,
		ErrorBackoffInitial: time.Millisecond,
		ErrorBackoffMax:     20 * time.Millisecond,
		MaxDequeueCount:     3 + rng.IntN(3),
		Dispatch:            listener.Dispatch(rng.IntN(2)),
		RetryDelay: func(*queue.Message, error) time.Duration {
			return time.Duration(1+seed%5) * time.Millisecond
		},
	}
	if o.NewBatchThreshold == 0 {
		o.NewBatchThreshold = -1
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = time.Millisecond
	}
	if rng.IntN(4) > 0 {
		o.Poison = pois
	}
	// Flow control: a rate limit (fast enough that a schedule still ends
	// in seconds) and an adaptive concurrency, each on some schedules.
	if rng.IntN(3) == 0 {
		o.RateLimit = listener.RateLimit{PerSecond: float64(100 + rng.IntN(2000)), Burst: rng.IntN(batch + 1)}
	}
	if rng.IntN(3) == 0 {
		lo := 1 + rng.IntN(3)
		o.Adaptive = &scaling.AIMDOptions{Min: lo, Max: lo + rng.IntN(o.Concurrency+1)}
	}
	// A third of the schedules run a batch handler (its own generator, so
	// that a seed's other choices stay what they were).
	brng := rand.New(rand.NewPCG(seed, 2))
	if brng.IntN(3) == 0 {
		o.BatchMax = 1 + brng.IntN(80)
		o.BatchWait = time.Duration(brng.IntN(20)) * time.Millisecond
		o.Concurrency = 1 + brng.IntN(4)
		o.Adaptive = nil // a batch handler's concurrency counts calls, fixed
	}
	if defaultPool {
		o.Tasks = 0
	}
	r.o = o
	var l *listener.Listener
	if o.BatchMax > 0 {
		l, err = listener.NewBatch(r.lq, r.handleBatch, o)
	} else {
		l, err = listener.New(r.lq, r.handle, o)
	}
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	r.l = l
	r.o.Tasks = l.Options().Tasks
	r.drive()
	r.check()
	if err := goleak.Find(ignore); err != nil {
		r.failf("goroutines survive Wait: %v", err)
	}
	if len(r.fails) > 0 {
		t.Errorf("torture schedule failed; replay it with\n\tgo test -race -run '^TestTorture$' ./listener/ -args -torture.seed=%d\noptions %+v\n%s",
			seed, o, strings.Join(r.fails, "\n"))
	}
	r.q.mu.Lock()
	defer r.q.mu.Unlock()
	return l.Stats(), r.q.stolen
}

func (r *tortureRun) put(n int) {
	for i := 0; i < n; i++ {
		r.mu.Lock()
		body := fmt.Sprintf("m%d", len(r.bodies))
		r.bodies = append(r.bodies, body)
		r.mu.Unlock()
		id, err := r.raw.Put(context.Background(), []byte(body), queue.PutOptions{})
		if err != nil {
			r.t.Fatal(err)
		}
		r.mu.Lock()
		r.idOf[body] = id
		r.mu.Unlock()
	}
}

// start runs the listener with n tasks; stop ends the run and checks that
// Wait returns within the grace plus waitBound with nothing left counted.
func (r *tortureRun) start(n int) (cancel context.CancelFunc, done chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	r.tasks.Store(int32(n))
	if err := r.l.Start(ctx, n); err != nil {
		r.failf("Start(%d): %v", n, err)
	}
	done = make(chan error, 1)
	go func() { done <- r.l.Wait() }()
	return cancel, done
}

func (r *tortureRun) stop(cancel context.CancelFunc, done chan error) bool {
	cancel()
	select {
	case err := <-done:
		if err != nil {
			r.failf("Wait: %v", err)
		}
	case <-time.After(r.o.ShutdownGrace + waitBound):
		r.failf("Wait has not returned %s after cancel (grace %s)", r.o.ShutdownGrace+waitBound, r.o.ShutdownGrace)
		return false
	}
	if n := r.l.ActiveTasks(); n != 0 {
		r.failf("ActiveTasks %d after Wait", n)
	}
	if st, _ := r.l.State(context.Background()); st.InFlight != 0 {
		r.failf("%d messages counted in flight after Wait", st.InFlight)
	}
	return true
}

// checkTasks: the pool is never below 0 nor above MaxTasks, and until
// it is resized no larger than the run started it or than the busy
// growth's bound (BusyTasks, at most MaxTasks).
func (r *tortureRun) checkTasks() {
	n := r.l.ActiveTasks()
	tasks, resized := int(r.tasks.Load()), r.resized.Load()
	if n < 0 || n > r.o.MaxTasks || !resized && n > max(tasks, min(r.q.busy, r.o.MaxTasks)) {
		r.failf("ActiveTasks %d (started with %d, BusyTasks %d, MaxTasks %d, resized %v)", n, tasks, r.q.busy, r.o.MaxTasks, resized)
	}
}

// drive puts messages and runs random events until every message has left
// the queue, then stops the listener.
func (r *tortureRun) drive() {
	rng := r.rng
	r.put(20 + rng.IntN(200))
	cancel, done := r.start(r.o.Tasks)
	deadline := time.Now().Add(2 * time.Minute)
	events := 5 + rng.IntN(30)
	steals := rng.IntN(4) // more competing gets while the queue drains
	for {
		time.Sleep(time.Duration(1+rng.IntN(15)) * time.Millisecond)
		r.checkTasks()
		if events > 0 {
			events--
			switch x := rng.IntN(100); {
			case x < 30 && r.noResize:
				r.l.Wake()
			case x < 30:
				r.resized.Store(true)
				r.l.Resize(1 + rng.IntN(r.o.MaxTasks))
			case x < 45:
				r.l.Abort()
			case x < 55:
				r.l.Wake()
			case x < 70:
				if !r.stop(cancel, done) {
					return
				}
				cancel, done = r.start(1 + rng.IntN(4))
			case x < 80:
				r.put(1 + rng.IntN(20))
			case x < 95:
				// A competing consumer, which now and then ends a lease
				// the listener holds first: leases are really lost.
				r.steal()
			}
			continue
		}
		if steals > 0 && rng.IntN(8) == 0 {
			steals--
			r.steal()
		}
		n, err := r.raw.Count(context.Background())
		if err != nil {
			r.t.Fatal(err)
		}
		if n == 0 {
			// Liveness: with the queue empty, every message the listener
			// counted in flight settles. A count held by a runner that
			// forgot it (the inline hand-off did) would hold a task's next
			// get, and its slots, for good. The bound only tells a hang.
			hang := time.Now().Add(waitBound)
			for r.l.ActiveTasks() > 0 {
				st, _ := r.l.State(context.Background())
				if st.InFlight == 0 {
					break
				}
				if time.Now().After(hang) {
					r.failf("%d messages still counted in flight %s after the queue emptied", st.InFlight, waitBound)
					break
				}
				time.Sleep(time.Millisecond)
			}
			break
		}
		if time.Now().After(deadline) {
			r.failf("%d messages still in the queue after 2 minutes", n)
			break
		}
	}
	r.stop(cancel, done)
}

// check: every message left the queue exactly once (one successful
// delete), its handler ran at most once per generation (checked as it
// ran), and it reached the poison queue at most once, more only when its
// poisoning delete came after its lease was really lost or was refused by
// an injected fault; no receipt a renewal replaced was used again.
func (r *tortureRun) check() {
	q := r.q
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, v := range q.violations {
		r.failf("%s", v)
	}
	poisoned := map[string]int{}
	for {
		ms, err := r.pois.Get(context.Background(), queue.MaxBatchSize, time.Hour)
		if err != nil {
			r.t.Fatal(err)
		}
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			poisoned[string(m.Body)]++
		}
	}
	r.mu.Lock()
	bodies := append([]string(nil), r.bodies...)
	idOf := r.idOf
	r.mu.Unlock()
	for _, b := range bodies {
		id := idOf[b]
		if d := q.deleted[id]; d != 1 {
			r.failf("%s (%s) was deleted %d times, want 1", b, id, d)
		}
		if p := poisoned[b]; p > 1+q.late[id]+q.faulted[id] {
			r.failf("%s reached the poison queue %d times (%d late calls, %d injected delete faults)", b, p, q.late[id], q.faulted[id])
		}
		if p := poisoned[b]; p > 0 && r.o.Poison == nil {
			r.failf("%s poisoned without a poison queue", b)
		}
	}
}

// steal runs the competing consumer: a raw get of a few messages with a
// short visibility, after ending (half the time) the lease of a message
// whose handler runs.
func (r *tortureRun) steal() {
	rng := r.rng
	var held []string
	if rng.IntN(2) == 0 {
		r.mu.Lock()
		for body, gs := range r.running {
			if len(gs) > 0 {
				held = append(held, r.idOf[body])
			}
		}
		r.mu.Unlock()
		slices.Sort(held) // map order is random; the seed replays the choice
	}
	r.q.steal(context.Background(), rng, 1+rng.IntN(4), time.Duration(1+rng.IntN(20))*time.Millisecond, held)
}
