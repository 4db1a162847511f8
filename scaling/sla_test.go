package scaling_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/scaling"
)

// at is a sample time s seconds after the fake clock's epoch.
func at(s float64) time.Time { return clock.Epoch.Add(time.Duration(s * float64(time.Second))) }

func TestSLARateIsAMovingAverageOfBusyIntervals(t *testing.T) {
	p := &scaling.SLA{Target: 30 * time.Second}
	if _, known := p.Rate(); known {
		t.Fatal("a rate is known before any sample")
	}
	steps := []struct {
		name   string
		s      scaling.Sample
		rate   float64
		known  bool
		anchor bool
	}{
		{"first sample: nothing to measure yet", scaling.Sample{At: at(0), Depth: 10_000, Tasks: 2, Drained: 0}, 0, false, false},
		{"10 s, 200 drained by 2 tasks: 10/s/task", scaling.Sample{At: at(10), Depth: 9_800, Tasks: 2, Drained: 200}, 10, true, false},
		{"400 more: 20/s/task, EWMA 10 + 0.3·(20−10)", scaling.Sample{At: at(20), Depth: 9_400, Tasks: 2, Drained: 600}, 13, true, false},
		{"0.5 s later: too short, merged into the next", scaling.Sample{At: at(20.5), Depth: 9_390, Tasks: 2, Drained: 610}, 13, true, false},
		{"merged interval 20..30 s: 260 by 2 = 13/s/task", scaling.Sample{At: at(30), Depth: 9_140, Tasks: 2, Drained: 860}, 13, true, false},
		{"ends with the queue empty: 8140 in 10 s by 2 is a lower bound, 407/s/task, above 13: raised", scaling.Sample{At: at(40), Depth: 0, Tasks: 2, Drained: 9_000}, 407, true, false},
		{"starts empty: skipped", scaling.Sample{At: at(50), Depth: 5_000, Tasks: 2, Drained: 9_000}, 407, true, false},
		{"a trickle (fewer than 32 waiting per task) says nothing", scaling.Sample{At: at(60), Depth: 40, Tasks: 2, Drained: 9_020}, 407, true, false},
		{"busy again from 40 waiting? no: the start was below 64", scaling.Sample{At: at(70), Depth: 5_000, Tasks: 2, Drained: 9_040}, 407, true, false},
		{"busy: 4 tasks drained 1200 in 10 s = 30/s/task", scaling.Sample{At: at(80), Depth: 4_000, Tasks: 4, Drained: 10_240}, 407 + 0.3*(30-407), true, false},
		{"emptied again, but the bound 100/s/task is below the estimate: kept", scaling.Sample{At: at(90), Depth: 0, Tasks: 4, Drained: 14_240}, 407 + 0.3*(30-407), true, false},
	}
	for _, st := range steps {
		p.Observe(st.s)
		rate, known := p.Rate()
		if known != st.known || math.Abs(rate-st.rate) > 1e-9 {
			t.Fatalf("%s: rate %v (known %v), want %v (known %v)", st.name, rate, known, st.rate, st.known)
		}
	}
	// A counter that goes back (a new pool) restarts the measurement
	// without a bogus negative rate.
	before, _ := p.Rate()
	p.Observe(scaling.Sample{At: at(100), Depth: 4_000, Tasks: 4, Drained: 5})
	p.Observe(scaling.Sample{At: at(110), Depth: 3_000, Tasks: 4, Drained: 1_205})
	if rate, _ := p.Rate(); math.Abs(rate-(before+0.3*(30-before))) > 1e-9 {
		t.Fatalf("after a counter reset: rate %v", rate)
	}
}

func TestSLANoDrainCannotStartAnEstimate(t *testing.T) {
	p := &scaling.SLA{}
	p.Observe(scaling.Sample{At: at(0), Depth: 10_000, Tasks: 4})
	p.Observe(scaling.Sample{At: at(5), Depth: 10_000, Tasks: 4}) // first batch still running
	if _, known := p.Rate(); known {
		t.Fatal("an interval with nothing drained made a rate known")
	}
	if got := p.Tasks(10_000); got != 313 {
		t.Fatalf("Tasks = %d, want the fallback's 313", got)
	}
	p.Observe(scaling.Sample{At: at(10), Depth: 9_000, Tasks: 4, Drained: 1_000}) // 50/s/task
	p.Observe(scaling.Sample{At: at(15), Depth: 9_000, Tasks: 4, Drained: 1_000}) // stalled: lowers it
	if rate, _ := p.Rate(); math.Abs(rate-35) > 1e-9 {
		t.Fatalf("rate %v after a stalled interval, want 50·0.7 = 35", rate)
	}
}

// learnt returns an SLA policy that has learnt rate messages/s/task and
// has last seen a pool of tasks tasks, the depth rising (rising) or falling.
func learnt(t *testing.T, o scaling.SLAOptions, target time.Duration, rate float64, tasks int, rising bool) *scaling.SLA {
	t.Helper()
	p, err := scaling.NewSLA(target, o)
	if err != nil {
		t.Fatal(err)
	}
	const depth = 1_000_000
	p.Observe(scaling.Sample{At: at(0), Depth: depth, Tasks: tasks})
	p.Observe(scaling.Sample{At: at(10), Depth: depth, Tasks: tasks, Drained: int64(rate * 10 * float64(tasks))})
	next := depth - 1
	if rising {
		next = depth + 1
	}
	p.Observe(scaling.Sample{At: at(20), Depth: next, Tasks: tasks, Drained: int64(rate * 20 * float64(tasks))})
	if got, known := p.Rate(); !known || math.Abs(got-rate) > 1e-9 {
		t.Fatalf("learnt rate %v (known %v), want %v", got, known, rate)
	}
	return p
}

func TestSLATasks(t *testing.T) {
	L := 30 * time.Second
	for _, tc := range []struct {
		name   string
		o      scaling.SLAOptions
		rate   float64
		tasks  int // the pool the policy last saw
		rising bool
		depth  int
		want   int
	}{
		{"ceil: 1000 / (10·30) = 3.3 → 4", scaling.SLAOptions{}, 10, 1, true, 1000, 4},
		{"exact: 3000 / (10·30) = 10", scaling.SLAOptions{}, 10, 1, true, 3000, 10},
		{"the brief's burst: 100000 / (50·30) = 66.7 → 67", scaling.SLAOptions{MaxTasks: 100}, 50, 1, true, 100_000, 67},
		{"too slow for the backlog: clamped to max", scaling.SLAOptions{MaxTasks: 100}, 10, 1, true, 100_000, 100},
		{"min clamps a small answer", scaling.SLAOptions{MinTasks: 5}, 10, 1, true, 10, 5},
		{"depth 0 gives the minimum", scaling.SLAOptions{MinTasks: 2}, 10, 1, true, 0, 2},
		{"a large pool shrinks only to what meets 0.8·L: 2000/(10·24) → 9", scaling.SLAOptions{}, 10, 10, true, 2000, 9},
		{"between the two thresholds the pool holds: 2300 → 8 to grow, 10 to shrink", scaling.SLAOptions{}, 10, 10, true, 2300, 10},
		{"a pool draining a backlog keeps its size", scaling.SLAOptions{}, 10, 10, false, 300, 10},
		{"a pool that fits grows at once", scaling.SLAOptions{}, 10, 10, false, 3300, 11},
		{"a custom margin: 2000/(10·27) → 8", scaling.SLAOptions{ShrinkMargin: 0.9}, 10, 10, true, 2000, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := learnt(t, tc.o, L, tc.rate, tc.tasks, tc.rising)
			if got := p.Tasks(tc.depth); got != tc.want {
				t.Fatalf("Tasks(%d) = %d, want %d", tc.depth, got, tc.want)
			}
		})
	}
}

func TestSLAFallsBackUntilARateIsKnown(t *testing.T) {
	p := &scaling.SLA{MaxTasks: 100}
	for depth, want := range map[int]int{1: 1, 32: 1, 33: 2, 1000: 32, 100_000: 100} {
		if got := p.Tasks(depth); got != want {
			t.Errorf("Proportional fallback: Tasks(%d) = %d, want %d", depth, got, want)
		}
	}
	q := &scaling.SLA{Fallback: scaling.SeedRules}
	if got := q.Tasks(500); got != 50 {
		t.Errorf("SeedRules fallback: Tasks(500) = %d, want 50", got)
	}
}

func TestSLAValidate(t *testing.T) {
	for _, o := range []struct {
		target time.Duration
		o      scaling.SLAOptions
		want   string
	}{
		{-time.Second, scaling.SLAOptions{}, "scaling: sla target -1s is negative"},
		{time.Second, scaling.SLAOptions{MinTasks: 5, MaxTasks: 2}, "scaling: sla max_tasks 2 is below min_tasks 5"},
		{time.Second, scaling.SLAOptions{Alpha: 1.5}, "scaling: sla alpha 1.5 is outside (0, 1]"},
		{time.Second, scaling.SLAOptions{ShrinkMargin: -0.1}, "scaling: sla shrink_margin -0.1 is outside (0, 1]"},
		{time.Second, scaling.SLAOptions{BusyDepth: -1}, "scaling: sla busy_depth -1 is negative"},
	} {
		_, err := scaling.NewSLA(o.target, o.o)
		if err == nil || err.Error() != o.want {
			t.Errorf("NewSLA(%s, %+v) = %v, want %q", o.target, o.o, err, o.want)
		}
	}
	if _, err := scaling.NewSLA(0, scaling.SLAOptions{}); err != nil {
		t.Errorf("defaults rejected: %v", err)
	}
}

// fluidPool is a deterministic, single-goroutine model of a listener whose
// every task drains rate messages a second, in ticks of virtual time. It
// is the scaling.Pool the real Agent sizes through Step.
type fluidPool struct {
	rate    float64 // messages per second per task
	trickle float64 // arrivals per second
	backlog float64 // messages waiting
	busy    int     // tasks holding a message at the end of the last tick
	drained float64
	tasks   int
	peak    int
}

// Depth counts waiting messages and those in service, as Count does.
func (f *fluidPool) Depth(context.Context) (int, error) {
	return int(math.Ceil(f.backlog-1e-9)) + f.busy, nil
}
func (f *fluidPool) ActiveTasks() int { return f.tasks }
func (f *fluidPool) Drained() int64   { return int64(f.drained) }
func (f *fluidPool) Resize(n int) {
	f.tasks = n
	f.peak = max(f.peak, n)
}

// tick advances the model by dt: arrivals join the backlog, and the tasks
// drain up to rate·dt each.
func (f *fluidPool) tick(dt time.Duration) {
	f.backlog += f.trickle * dt.Seconds()
	perTask := f.rate * dt.Seconds()
	served := math.Min(f.backlog, float64(f.tasks)*perTask)
	f.backlog -= served
	f.drained += served
	f.busy = min(f.tasks, int(math.Ceil(served/perTask-1e-9)))
}

// driver runs the real Agent over a fluidPool in virtual time, as Run
// would: dormant until work appears, then a Step at once and every
// Interval while the queue holds messages.
type driver struct {
	clk    *clock.Fake
	pool   *fluidPool
	agent  *scaling.Agent
	awake  bool
	next   time.Time
	maxSaw int
}

const tick = 100 * time.Millisecond

func newDriver(pool *fluidPool, policy scaling.Policy, maxTasks int) *driver {
	clk := clock.NewFake(time.Time{})
	pool.tasks, pool.peak = 1, 1
	a := scaling.NewAgent(pool, policy, scaling.AgentOptions{MaxTasks: maxTasks, Clock: clk})
	return &driver{clk: clk, pool: pool, agent: a}
}

// burst adds n messages and wakes the agent (WorkDetected).
func (d *driver) burst(n int) {
	d.pool.backlog += float64(n)
	if !d.awake {
		d.awake, d.next = true, d.clk.Now()
	}
}

// run advances virtual time by total, calling until after each tick; it
// stops early when until returns true and reports the time taken.
func (d *driver) run(total time.Duration, until func() bool) time.Duration {
	start := d.clk.Now()
	for d.clk.Now().Sub(start) < total {
		if d.awake && !d.clk.Now().Before(d.next) {
			if d.agent.Step(context.Background()) {
				d.next = d.clk.Now().Add(d.agent.Options().Interval)
			} else {
				d.awake = false
			}
		}
		d.pool.tick(tick)
		d.clk.Advance(tick)
		d.maxSaw = max(d.maxSaw, d.pool.tasks)
		if until != nil && until() {
			break
		}
		if !d.awake && d.pool.backlog > 0 {
			d.awake, d.next = true, d.clk.Now() // a task found work after idling
		}
	}
	return d.clk.Now().Sub(start)
}

func (d *driver) emptied() bool { return d.pool.backlog < 1e-9 }

func TestSLAGrowsToMeetTheTargetAndShrinksAfterTheBurst(t *testing.T) {
	const (
		rate   = 50 // msgs/s per task
		burst  = 100_000
		target = 30 * time.Second
	)
	sla := &scaling.SLA{Target: target, MaxTasks: 100}
	pool := &fluidPool{rate: rate}
	d := newDriver(pool, sla, 100)

	// The first burst: no rate known yet, so the fallback (one task per 32
	// waiting) grows the pool to its maximum, and the agent learns.
	d.burst(burst)
	took := d.run(10*time.Minute, d.emptied)
	if got, known := sla.Rate(); !known || math.Abs(got-rate) > 0.5 {
		t.Fatalf("learnt rate %v (known %v), want %d", got, known, rate)
	}
	if took > target || d.maxSaw != 100 {
		t.Fatalf("first burst: drained in %s with up to %d tasks", took, d.maxSaw)
	}
	d.run(time.Minute, nil)     // the agent sees the empty queue and sleeps
	pool.tasks, d.maxSaw = 1, 1 // the listener's idle rule stops the rest

	// The second burst, over a trickle of 20 msgs/s: the learnt rate says
	// 100,000 / (50 × 30) = 66.7 → 67 tasks, which drain it within L.
	pool.trickle = 20
	d.burst(burst)
	took = d.run(10*time.Minute, d.emptied)
	if d.maxSaw != 67 {
		t.Fatalf("second burst: the pool grew to %d tasks, want 67 (ceil(100000 / (50·30)))", d.maxSaw)
	}
	if took > target+target/20 {
		t.Fatalf("second burst: the backlog drained in %s, want within %s (+5%%)", took, target)
	}
	t.Logf("second burst drained in %s with %d tasks", took, d.maxSaw)

	// The burst is gone and the trickle needs one task: the pool shrinks
	// after ShrinkAfter samples, without waiting for the queue to empty.
	took = d.run(5*time.Minute, func() bool { return pool.tasks == 1 })
	if pool.tasks != 1 {
		t.Fatalf("after the burst the pool is %d tasks, want 1", pool.tasks)
	}
	if took > 30*time.Second {
		t.Fatalf("shrinking took %s", took)
	}
	if !d.awake {
		t.Fatal("the agent went to sleep while the trickle kept the queue busy")
	}
}

func TestSLAStaysWithinMaxWhenTheHandlerIsTooSlow(t *testing.T) {
	const rate = 10 // msgs/s per task: 100,000 in 30 s would need 334 tasks
	sla := &scaling.SLA{Target: 30 * time.Second, MaxTasks: 100}
	pool := &fluidPool{rate: rate}
	d := newDriver(pool, sla, 100)
	d.burst(100_000)
	took := d.run(time.Hour, d.emptied)
	if d.maxSaw != 100 || pool.peak != 100 {
		t.Fatalf("peak %d tasks, want the maximum 100", pool.peak)
	}
	if want := 100 * time.Second; took < want-5*time.Second || took > want+5*time.Second {
		t.Fatalf("drained in %s, want about %s (100 tasks × 10/s)", took, want)
	}
	if n := sla.Tasks(100_000); n != 100 {
		t.Fatalf("Tasks(100000) = %d, want the clamp at 100", n)
	}
}

// recordingPolicy is an Observer that records the samples it sees.
type recordingPolicy struct {
	mu      sync.Mutex
	samples []scaling.Sample
	asked   []int
}

func (r *recordingPolicy) Observe(s scaling.Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, s)
}

func (r *recordingPolicy) Tasks(depth int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, depth)
	return 7
}

func TestAgentShowsEverySampleToAnObserverFirst(t *testing.T) {
	c := clock.NewFake(time.Time{})
	p := &pool{tasks: 2, depth: 500, drained: 1234}
	pol := &recordingPolicy{}
	a := scaling.NewAgent(p, pol, scaling.AgentOptions{Clock: c})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	a.WorkDetected()
	waitFor(t, "the resize", func() bool { tasks, _, _ := p.state(); return tasks == 7 })
	p.set(0)
	c.WaitPending(ctx, 1)
	c.AdvanceToNext()
	waitFor(t, "the empty sample", func() bool {
		pol.mu.Lock()
		defer pol.mu.Unlock()
		return len(pol.samples) == 2
	})
	pol.mu.Lock()
	defer pol.mu.Unlock()
	want := scaling.Sample{At: clock.Epoch, Depth: 500, Tasks: 2, Drained: 1234}
	if pol.samples[0] != want {
		t.Errorf("first sample %+v, want %+v", pol.samples[0], want)
	}
	if s := pol.samples[1]; s.Depth != 0 || s.Tasks != 7 || !s.At.Equal(clock.Epoch.Add(scaling.DefaultSampleInterval)) {
		t.Errorf("second sample %+v", s)
	}
	if len(pol.asked) != 1 || pol.asked[0] != 500 {
		t.Errorf("Tasks asked for %v, want [500] (not for the empty queue)", pol.asked)
	}
}

func TestSLALearnsALowerBoundFromABurstDrainedWithinOneSample(t *testing.T) {
	p := &scaling.SLA{Target: 30 * time.Second, MaxTasks: 100}
	if got := p.Tasks(3200); got != 100 {
		t.Fatalf("fallback: Tasks(3200) = %d, want 100", got)
	}
	// 100 tasks emptied 3,200 messages some time within 5 s: at least
	// 6.4 messages a second each.
	p.Observe(scaling.Sample{At: at(0), Depth: 3200, Tasks: 1})
	p.Observe(scaling.Sample{At: at(5), Depth: 0, Tasks: 100, Drained: 3200})
	if rate, known := p.Rate(); !known || math.Abs(rate-6.4) > 1e-9 {
		t.Fatalf("rate %v (known %v), want the bound 6.4", rate, known)
	}
	// The next burst of that size: ceil(3200 / (6.4 × 30)) = 17 tasks, not
	// the fallback's 100.
	p.Observe(scaling.Sample{At: at(3600), Depth: 3200, Tasks: 1, Drained: 3200})
	if got := p.Tasks(3200); got != 17 {
		t.Fatalf("Tasks(3200) = %d, want 17", got)
	}
}
