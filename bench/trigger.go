package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/queue/sqlite"
	"github.com/adaptq/adaptq/scaling"
)

// Trigger targets.
const (
	// TriggerP99Target bounds the wake latency from Notify to handler
	// start.
	TriggerP99Target = 50 * time.Millisecond
	// IdleCallsPerHourTarget bounds an idle process's calls with a
	// trigger configured (one safety poll every 5 minutes).
	IdleCallsPerHourTarget = 12
)

// lane is one listener on its own queue, measuring wake latencies: the
// time from the moment a message is in the queue (Put returned; Notify
// with a trigger) to its handler's start.
type lane struct {
	q        *queue.Queue
	l        *listener.Listener
	notifier *listener.LocalNotifier
	started  chan laneStart
}

type laneStart struct {
	at        time.Time
	emptyGets int64 // the listener's empty gets when the handler started
}

func newLane(ctx context.Context, db *sqlite.DB, name string, o listener.Options) (*lane, error) {
	q, err := db.Queue(name)
	if err != nil {
		return nil, err
	}
	ln := &lane{q: q, started: make(chan laneStart, 1)}
	if n, ok := o.Notifier.(*listener.LocalNotifier); ok {
		ln.notifier = n
	}
	h := func(context.Context, *queue.Message) error {
		s := laneStart{at: time.Now(), emptyGets: ln.l.Stats().EmptyGets}
		select {
		case ln.started <- s:
		default:
		}
		return nil
	}
	if ln.l, err = listener.New(q, h, o); err != nil {
		return nil, err
	}
	if err := ln.l.Start(ctx, 1); err != nil {
		return nil, err
	}
	return ln, nil
}

// trial waits until the lane's task has made idleGets empty gets since its
// last message, then pause longer, puts a message (and notifies) and
// returns the time until its handler started.
func (ln *lane) trial(ctx context.Context, since int64, idleGets int, pause time.Duration) (time.Duration, int64, error) {
	if err := waitFor(ctx, 5*time.Minute, func() bool { return ln.l.Stats().EmptyGets >= since+int64(idleGets) }); err != nil {
		return 0, 0, fmt.Errorf("waiting for the task to idle: %w", err)
	}
	if pause > 0 {
		time.Sleep(pause)
	}
	if _, err := ln.q.Put(ctx, jsonBody, queue.PutOptions{}); err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	if ln.notifier != nil {
		ln.notifier.Notify(ln.q.Name())
	}
	select {
	case s := <-ln.started:
		return s.at.Sub(t0), s.emptyGets, nil
	case <-time.After(5 * time.Minute):
		return 0, 0, fmt.Errorf("no handler start: %w", errTimeout)
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
}

func trigger(ctx context.Context, e *Env, s *Section) error {
	trials, pollTrials, lanes, idleMax := e.Sizes.TriggerTrials, e.Sizes.PollTrials, e.Sizes.PollLanes, e.Sizes.PollIdleMax
	lanes = min(lanes, pollTrials)
	kCap := capIdleCount(idleBackoff(idleMax))
	s.how("Isolated wake latency: one message landing on a task that has been idle, not a steady rate (the section \"Pickup at steady rates\" "+
		"measures those). The embedded SQLite driver on a fresh file, real clock, a no-op handler, one task, the listener's defaults "+
		"for a backend whose calls are not billed (a 10 ms latency target: idle.min, idle.delta and the trigger floor 5 ms). "+
		"A trial waits until "+
		"the task has gone back to sleep after the previous message, puts one message and takes the time from the moment Put "+
		"returned to the moment the handler starts. **With the trigger** (`listener.LocalNotifier`, the listener's defaults "+
		"otherwise: idle sleeps grow toward the 5-minute safety interval), Notify is called as soon as Put returns; %d trials "+
		"one after another, each landing on an idle task: after the first empty get in a row whose sleep is 60 ms longer than "+
		"the floor, at a random moment between "+
		"the trigger floor (a woken task gets no sooner than min(idle.min, latency target/2) after its last empty get, so that a "+
		"trickle of triggered puts is fetched in batches) plus 20 ms and 20 ms before that sleep could end. Then %d "+
		"**trickle** trials notify inside the floor (20–80%% of it after the task's empty get), to show what the floor costs a "+
		"message that follows another closely. **Without**, the same listener has no "+
		"trigger and idle.max = %s (the default, 1 minute, would make 200 trials take hours): a trial waits until the task's "+
		"sleep has reached that cap (%d empty gets in a row), then a random 0–%s more, so the message lands at a uniformly "+
		"random moment of a capped sleep; %d trials in %d concurrent lanes (a listener and queue each, on one file), which "+
		"changes nothing for sleeping listeners but keeps the run short.",
		trials, max(trials/4, 1), idleMax, kCap, idleMax, pollTrials, lanes)

	dir, err := e.tempDir("trigger")
	if err != nil {
		return err
	}
	db, err := sqlite.Open(filepath.Join(dir, "trigger.db"))
	if err != nil {
		return err
	}
	defer db.Close()
	runCtx, cancel := context.WithCancel(ctx)
	var started []*lane
	defer func() {
		cancel()
		for _, ln := range started {
			_ = ln.l.Wait()
		}
	}()

	// With the trigger: one lane, trials in a row. An idle trial notifies
	// after the trigger floor (a woken task gets no sooner than the floor
	// after its empty get) and before the task's second sleep could end; a
	// trickle trial notifies inside the floor.
	trigOpts := listener.Options{Notifier: &listener.LocalNotifier{}}
	trig, err := newLane(runCtx, db, "triggered", trigOpts)
	if err != nil {
		return err
	}
	started = append(started, trig)
	o := trig.l.Options()
	idle := o.Idle
	floor := min(idle.Min, o.LatencyTarget/2)
	// An isolated trial waits for the first empty get in a row whose sleep
	// is at least 60 ms longer than the floor, then lands 20 ms past the
	// floor to 20 ms before the sleep could end.
	idleK := 2
	for idle.DelayWith(idleK, scaling.JitterMin) < floor+60*time.Millisecond {
		idleK++
	}
	idleLo, idleHi := floor+20*time.Millisecond, idle.DelayWith(idleK, scaling.JitterMin)-20*time.Millisecond
	trickles := max(trials/4, 1)
	var withTrig, trickle []time.Duration
	var since int64
	for i := 0; i < trials+trickles; i++ {
		idleGets, pause := idleK, idleLo+rand.N(idleHi-idleLo)
		if i >= trials {
			idleGets, pause = 1, floor/5+rand.N(floor*3/5)
		}
		d, eg, err := trig.trial(ctx, since, idleGets, pause)
		if err != nil {
			return fmt.Errorf("trigger trial %d: %w", i, err)
		}
		if i < trials {
			withTrig = append(withTrig, d)
		} else {
			trickle = append(trickle, d)
		}
		since = eg
	}
	if got := trig.l.Stats().Triggers; got != int64(trials+trickles) {
		return fmt.Errorf("the triggered listener received %d triggers, want %d", got, trials+trickles)
	}
	e.logf("trigger: with trigger: p50 %s p99 %s", ms(percentile(withTrig, 50)), ms(percentile(withTrig, 99)))

	// Without: lanes in parallel, each with its share of the trials.
	var mu sync.Mutex
	var noTrig []time.Duration
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	for i := 0; i < lanes; i++ {
		share := pollTrials / lanes
		if i < pollTrials%lanes {
			share++
		}
		ln, err := newLane(runCtx, db, fmt.Sprintf("polled-%d", i), listener.Options{Idle: idleBackoff(idleMax)})
		if err != nil {
			return err
		}
		started = append(started, ln)
		wg.Go(func() {
			var since int64
			for j := 0; j < share; j++ {
				d, eg, err := ln.trial(ctx, since, kCap, rand.N(idleMax))
				if err != nil {
					err = fmt.Errorf("lane %d trial %d: %w", i, j, err)
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				mu.Lock()
				noTrig = append(noTrig, d)
				mu.Unlock()
				since = eg
			}
		})
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return *p
	}
	e.logf("trigger: without: p50 %s p99 %s", ms(percentile(noTrig, 50)), ms(percentile(noTrig, 99)))

	p99 := percentile(withTrig, 99)
	s.add(Row{
		What:   fmt.Sprintf("isolated wake with the trigger (one message on an idle task, not a steady rate): Notify → handler start, p50 / p99 of %d", len(withTrig)),
		Figure: fmt.Sprintf("%s / %s", ms(percentile(withTrig, 50)), ms(p99)),
		Target: "p99 ≤ 50 ms",
		Holds:  verdict(p99 <= TriggerP99Target),
		Note:   fmt.Sprintf("max %s", ms(maxDuration(withTrig))),
	})
	s.add(Row{
		What:   fmt.Sprintf("isolated wake with the trigger, trickle (Notify inside the trigger floor): p50 / p99 of %d", len(trickle)),
		Figure: fmt.Sprintf("%s / %s", ms(percentile(trickle, 50)), ms(percentile(trickle, 99))),
		Note:   fmt.Sprintf("by design: the get waits for the floor (%s after the empty get), so close-following messages are fetched together", floor),
	})
	s.add(Row{
		What:   fmt.Sprintf("isolated wake without a trigger (one message on a task asleep at idle.max %s): Put → handler start, p50 / p99 of %d", idleMax, len(noTrig)),
		Figure: fmt.Sprintf("%s / %s", ms(percentile(noTrig, 50)), ms(percentile(noTrig, 99))),
		Note:   fmt.Sprintf("max %s: the rest of the task's capped sleep, uniform on 0–%s; with the default idle.max it is 0–1 min", ms(maxDuration(noTrig)), idleMax),
	})
	if p99 > TriggerP99Target {
		s.note("The trigger's p99 misses: the slowest trials are the ones where the waking goroutine waited for a core "+
			"(load average at the end of the run: %s on %d cores).", loadAverage(), runtime.NumCPU())
	}

	// Idle calls per hour, in virtual time.
	hours := e.Sizes.IdleHours
	s.how("Idle calls per hour: a worker's queue with the trigger configured (a listener with `listener.LocalNotifier`, 1 task, "+
		"the default idle backoff and 5-minute safety interval, and its scaling agent) on the embedded SQLite driver, both on "+
		"one fake clock (`sqlite.WithClock` and `listener.Options.Clock`), every call counted by the cost meter. The harness "+
		"fires each idle sleep's timer in turn until a sleep is as long as the safety interval (the backoff's cap), then "+
		"counts the meter's calls over %d further virtual hour%s and divides. The same without a trigger (default idle.max, "+
		"1 minute) for comparison.", hours, plural(hours))
	for _, withTrigger := range []bool{true, false} {
		perHour, warm, err := idleCallsPerHour(ctx, e, withTrigger, hours)
		if err != nil {
			return fmt.Errorf("idle calls per hour (trigger %v): %w", withTrigger, err)
		}
		e.logf("trigger: idle calls per hour (trigger %v): %.2f", withTrigger, perHour)
		if withTrigger {
			s.add(Row{
				What:   "idle calls per hour per process, trigger configured",
				Figure: fmt.Sprintf("%.2f", perHour),
				Target: fmt.Sprintf("≤ %d", IdleCallsPerHourTarget),
				Holds:  verdict(perHour <= IdleCallsPerHourTarget),
				Note:   fmt.Sprintf("counted over %d virtual hour%s after the backoff reached its cap (%s of idling before that)", hours, plural(hours), warm.Round(time.Second)),
			})
		} else {
			s.add(Row{
				What:   "idle calls per hour per process, no trigger (idle.max 1 min)",
				Figure: fmt.Sprintf("%.2f", perHour),
				Note:   fmt.Sprintf("for comparison; the naive loop of “Queues in Windows Azure Storage” makes 3,600 (one get a second); %s of idling before the count", warm.Round(time.Second)),
			})
		}
	}
	return nil
}

// idleCallsPerHour runs an idle worker queue in virtual time and returns
// its billed calls per hour once the idle backoff is at its cap, and how
// much virtual time reaching the cap took.
func idleCallsPerHour(ctx context.Context, e *Env, withTrigger bool, hours int) (float64, time.Duration, error) {
	dir, err := e.tempDir("idle")
	if err != nil {
		return 0, 0, err
	}
	fc := clock.NewFake(clock.Epoch)
	db, err := sqlite.Open(filepath.Join(dir, "idle.db"), sqlite.WithClock(fc))
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	m := meter.New(0)
	q, err := db.Queue("idle", queue.WithObserver(m))
	if err != nil {
		return 0, 0, err
	}
	var agent *scaling.Agent
	o := listener.Options{
		Tasks: 1, MinTasks: 1, MaxTasks: listener.DefaultMaxTasks,
		Clock:        fc,
		WorkDetected: func(*listener.Listener) { agent.WorkDetected() },
	}
	if withTrigger {
		o.Notifier = &listener.LocalNotifier{}
	}
	l, err := listener.New(q, noop, o)
	if err != nil {
		return 0, 0, err
	}
	agent = scaling.NewAgent(l, scaling.Proportional{}, scaling.AgentOptions{MaxTasks: listener.DefaultMaxTasks, Clock: fc})
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = agent.Run(runCtx) })
	if err := l.Start(runCtx, 1); err != nil {
		cancel()
		wg.Wait()
		return 0, 0, err
	}
	defer func() {
		cancel() // an idle listener has no handler to wait for: no fake timer holds the shutdown
		_ = l.Wait()
		wg.Wait()
	}()

	limit := l.Options().Idle.Max
	if withTrigger {
		limit = l.Options().SafetyInterval
	}
	// asleep waits until the task sleeps and returns how long its sleep is.
	asleep := func() (time.Duration, error) {
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		defer wcancel()
		if !fc.WaitPending(wctx, 1) {
			return 0, fmt.Errorf("the listener did not go to sleep: %w", errTimeout)
		}
		ds := fc.Deadlines()
		return ds[len(ds)-1], nil
	}
	start := fc.Now()
	for {
		d, err := asleep()
		if err != nil {
			return 0, 0, err
		}
		if d >= limit {
			break
		}
		fc.AdvanceToNext()
	}
	warm := fc.Now().Sub(start)
	before := m.Snapshot()
	from := fc.Now()
	end := from.Add(time.Duration(hours) * time.Hour)
	for {
		if _, err := asleep(); err != nil {
			return 0, 0, err
		}
		next, ok := fc.NextDeadline()
		if !ok || next.After(end) {
			break
		}
		fc.AdvanceToNext()
	}
	calls := m.Snapshot().Sub(before)
	if calls.TotalErrors() > 0 {
		return 0, 0, fmt.Errorf("%d calls failed", calls.TotalErrors())
	}
	return float64(calls.Total()) / float64(hours), warm, nil
}
