package scaling_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/testutil"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/scaling"
)

func TestIdleBackoffStaysInsideTheSeedFormula(t *testing.T) {
	b := scaling.IdleBackoff{Min: 100 * time.Millisecond, Max: time.Minute, Delta: 100 * time.Millisecond}
	for k := 1; k <= 20; k++ {
		exp := math.Exp2(float64(k)) - 1
		lo := time.Duration(math.Min(float64(b.Min)+exp*0.8*float64(b.Delta), float64(b.Max)))
		hi := time.Duration(math.Min(float64(b.Min)+exp*1.2*float64(b.Delta), float64(b.Max)))
		for i := 0; i < 200; i++ {
			d := b.Delay(k)
			if d < lo || d > hi {
				t.Fatalf("Delay(%d) = %s outside [%s, %s]", k, d, lo, hi)
			}
		}
		if got := b.DelayWith(k, scaling.JitterMin); got != lo {
			t.Errorf("DelayWith(%d, 0.8) = %s, want %s", k, got, lo)
		}
		if got := b.DelayWith(k, scaling.JitterMax); got != hi {
			t.Errorf("DelayWith(%d, 1.2) = %s, want %s", k, got, hi)
		}
	}
	// The Best Practices article's first steps: 100 ms + 1·[80,120] ms, + 3·[80,120] ms …
	if got := b.DelayWith(1, 1); got != 200*time.Millisecond {
		t.Errorf("first delay = %s, want 200ms", got)
	}
	if got := b.DelayWith(3, 1); got != 800*time.Millisecond {
		t.Errorf("third delay = %s, want 800ms", got)
	}
	if got := b.DelayWith(1000, 1.2); got != time.Minute {
		t.Errorf("huge k = %s, want the maximum", got)
	}
	if got := b.DelayWith(0, 1); got != b.Min {
		t.Errorf("k = 0 gives %s, want the minimum", got)
	}
	// The jitter spreads tasks out: many draws at one k are not all equal.
	seen := map[time.Duration]bool{}
	for i := 0; i < 50; i++ {
		seen[b.Delay(5)] = true
	}
	if len(seen) < 10 {
		t.Errorf("50 draws gave %d distinct delays: no jitter", len(seen))
	}
}

func TestStopRule(t *testing.T) {
	b := scaling.IdleBackoff{}.WithDefaults()
	for _, tc := range []struct {
		delay  time.Duration
		active int
		stop   bool
	}{
		{time.Minute, 2, true},
		{time.Minute, 1, false}, // the last task keeps polling
		{59 * time.Second, 5, false},
	} {
		if got := b.ShouldStop(tc.delay, tc.active); got != tc.stop {
			t.Errorf("ShouldStop(%s, %d) = %v, want %v", tc.delay, tc.active, got, tc.stop)
		}
	}
	if err := (scaling.IdleBackoff{Min: -1}).Validate(); err == nil {
		t.Error("negative min accepted")
	}
}

func TestPolicies(t *testing.T) {
	for _, tc := range []struct {
		p     scaling.Policy
		depth int
		want  int
	}{
		{scaling.SeedRules, 0, 10},
		{scaling.SeedRules, 99, 10},
		{scaling.SeedRules, 100, 50},
		{scaling.SeedRules, 999, 50},
		{scaling.SeedRules, 1000, 100},
		{scaling.SeedRules, 1 << 30, 100},
		{scaling.Proportional{PerTask: 32}, 0, 1},
		{scaling.Proportional{PerTask: 32}, 1, 1},
		{scaling.Proportional{PerTask: 32}, 32, 1},
		{scaling.Proportional{PerTask: 32}, 33, 2},
		{scaling.Proportional{}, 10_000, 313},
		{scaling.PolicyFunc(func(d int) int { return d * 2 }), 4, 8},
	} {
		if got := tc.p.Tasks(tc.depth); got != tc.want {
			t.Errorf("%T.Tasks(%d) = %d, want %d", tc.p, tc.depth, got, tc.want)
		}
	}
	if got := scaling.Clamp(500, 1, 100); got != 100 {
		t.Errorf("Clamp above = %d", got)
	}
	if got := scaling.Clamp(0, 2, 100); got != 2 {
		t.Errorf("Clamp below = %d", got)
	}
	if got := scaling.Clamp(500, 1, 0); got != 500 {
		t.Errorf("Clamp without max = %d", got)
	}
	if err := scaling.SeedRules.Validate(); err != nil {
		t.Error(err)
	}
	bad := scaling.StaticRules{Rules: []scaling.Rule{{Below: 100, Tasks: 5}, {Below: 50, Tasks: 9}}, Else: 10}
	if err := bad.Validate(); err == nil {
		t.Error("rules out of order accepted")
	}
}

// pool is a fake scaling.Pool whose depth (and drained count) the test
// sets.
type pool struct {
	mu      sync.Mutex
	depth   int
	drained int64
	tasks   int
	resizes []int
	samples int
}

func (p *pool) Depth(context.Context) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.samples++
	return p.depth, nil
}
func (p *pool) ActiveTasks() int { p.mu.Lock(); defer p.mu.Unlock(); return p.tasks }
func (p *pool) Drained() int64   { p.mu.Lock(); defer p.mu.Unlock(); return p.drained }
func (p *pool) Resize(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tasks = n
	p.resizes = append(p.resizes, n)
}
func (p *pool) set(depth int) { p.mu.Lock(); p.depth = depth; p.mu.Unlock() }
func (p *pool) state() (int, []int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tasks, append([]int(nil), p.resizes...), p.samples
}

func TestAgentGrowsAtOnceShrinksWithHysteresisAndSleepsWhenEmpty(t *testing.T) {
	c := clock.NewFake(time.Time{})
	p := &pool{tasks: 1}
	a := scaling.NewAgent(p, scaling.SeedRules, scaling.AgentOptions{MaxTasks: 80, Interval: 5 * time.Second, ShrinkAfter: 3, Clock: c})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// Dormant: no signal, no samples.
	time.Sleep(5 * time.Millisecond)
	if _, _, samples := p.state(); samples != 0 {
		t.Fatalf("%d samples before any work was detected", samples)
	}
	p.set(5000)
	a.WorkDetected()
	waitFor(t, "growth to the clamped rule", func() bool { tasks, _, _ := p.state(); return tasks == 80 })

	// The depth drops into the 50-task row: only the third sample in a row
	// shrinks the pool.
	p.set(500)
	for i := 1; i <= 3; i++ {
		c.WaitPending(ctx, 1)
		c.AdvanceToNext()
		waitFor(t, "a sample", func() bool { _, _, s := p.state(); return s == 1+i })
		tasks, _, _ := p.state()
		if i < 3 && tasks != 80 {
			t.Fatalf("shrank to %d after %d samples", tasks, i)
		}
	}
	waitFor(t, "shrink to 50", func() bool { tasks, _, _ := p.state(); return tasks == 50 })

	// A dip and a recovery do not shrink: the count of samples restarts.
	p.set(50) // 10 tasks
	c.WaitPending(ctx, 1)
	c.AdvanceToNext()
	waitFor(t, "a sample", func() bool { _, _, s := p.state(); return s == 5 })
	p.set(500)
	c.WaitPending(ctx, 1)
	c.AdvanceToNext()
	waitFor(t, "a sample", func() bool { _, _, s := p.state(); return s == 6 })
	if tasks, _, _ := p.state(); tasks != 50 {
		t.Fatalf("one low sample changed the pool to %d", tasks)
	}

	// Empty: the agent stops sampling and leaves shrinking to QueueEmpty.
	p.set(0)
	c.WaitPending(ctx, 1)
	c.AdvanceToNext()
	waitFor(t, "the empty sample", func() bool { _, _, s := p.state(); return s == 7 })
	waitFor(t, "the agent to go dormant", func() bool { return c.Pending() == 0 })
	c.Advance(time.Hour)
	time.Sleep(5 * time.Millisecond)
	tasks, resizes, samples := p.state()
	if samples != 7 {
		t.Fatalf("%d samples while the queue was empty", samples-7)
	}
	if tasks != 50 || len(resizes) != 2 {
		t.Fatalf("resizes %v, tasks %d: want [80 50]", resizes, tasks)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, what, cond)
}
