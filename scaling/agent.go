package scaling

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/internal/clock"
)

// Agent defaults.
const (
	// DefaultSampleInterval is how often the agent reads the depth while the
	// queue is busy. Each read is one billed Count call: 720 an hour busy,
	// none idle.
	DefaultSampleInterval = 5 * time.Second
	// DefaultShrinkAfter is how many samples in a row must call for fewer
	// tasks before the agent shrinks the pool: the hysteresis that keeps it
	// from flapping around a rule's boundary.
	DefaultShrinkAfter = 3
)

// Pool is what the agent resizes: a listener, seen from here.
type Pool interface {
	// Depth is the queue's approximate message count (one billed call).
	Depth(ctx context.Context) (int, error)
	// ActiveTasks is the number of dequeue tasks running now.
	ActiveTasks() int
	// Resize makes the pool n tasks.
	Resize(n int)
	// Drained is the number of messages that have left the queue through
	// the pool since it was made (listener.Listener.Drained): a rate-based
	// policy divides its growth by time and tasks.
	Drained() int64
}

// Sample is one observation of a pool, taken by the agent each time it
// reads the depth.
type Sample struct {
	// At is when the sample was taken (the agent's clock).
	At time.Time
	// Depth is the queue's approximate count.
	Depth int
	// Tasks is the pool's active tasks, read before the agent resizes: the
	// tasks that ran through the interval that ends at At.
	Tasks int
	// Drained is the pool's Drained count at At.
	Drained int64
}

// Observer is a Policy that learns from the agent's samples. The agent
// calls Observe with every sample, before it asks Tasks for the same
// depth. SLA is one.
type Observer interface {
	Observe(s Sample)
}

// AgentOptions configure an Agent. Zero values take the defaults.
type AgentOptions struct {
	// MinTasks and MaxTasks clamp the policy's answer (MaxTasks 0: no limit).
	MinTasks, MaxTasks int
	// Interval between depth samples while busy.
	Interval time.Duration
	// ShrinkAfter is the number of samples in a row that must ask for fewer
	// tasks before the pool shrinks.
	ShrinkAfter int
	// ShrinkWhenEmpty resizes the pool to MinTasks as soon as a sample finds
	// the queue empty (nothing waiting, nothing in flight), instead of
	// leaving the surplus tasks to back off until the QueueEmpty stop rule
	// ends them, each making about ten empty gets on the way. The Best Practices article's
	// listener shrinks only by its stop rule; adaptq's worker sets this.
	ShrinkWhenEmpty bool
	Clock           clock.Clock
	Logger          *zap.Logger
}

// Agent sizes a pool from its queue's depth. It sleeps until WorkDetected
// is called, then samples the depth at once and every Interval while the
// queue holds messages, growing the pool immediately and shrinking it only
// after ShrinkAfter samples in a row. When the depth reaches zero it goes
// back to sleep and leaves idle shrinking to the listener's QueueEmpty rule.
type Agent struct {
	pool   Pool
	policy Policy
	o      AgentOptions
	signal chan struct{}
	// below counts samples in a row that asked for fewer tasks. Only the
	// goroutine running the agent (Run, or the caller of Step) touches it.
	below int
}

// NewAgent returns an agent that resizes pool by policy.
func NewAgent(pool Pool, policy Policy, o AgentOptions) *Agent {
	if o.MinTasks < 1 {
		o.MinTasks = 1
	}
	if o.Interval <= 0 {
		o.Interval = DefaultSampleInterval
	}
	if o.ShrinkAfter <= 0 {
		o.ShrinkAfter = DefaultShrinkAfter
	}
	if o.Clock == nil {
		o.Clock = clock.Real
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return &Agent{pool: pool, policy: policy, o: o, signal: make(chan struct{}, 1)}
}

// WorkDetected tells the agent that an idle task found work (the Best Practices article's
// QueueWorkDetected). It never blocks; signals while one is pending merge.
func (a *Agent) WorkDetected() {
	select {
	case a.signal <- struct{}{}:
	default:
	}
}

// Options returns the options in effect, defaults filled in.
func (a *Agent) Options() AgentOptions { return a.o }

// Target is the pool size the agent wants for depth.
func (a *Agent) Target(depth int) int {
	return Clamp(a.policy.Tasks(depth), a.o.MinTasks, a.o.MaxTasks)
}

// Run works until ctx ends and returns nil then.
func (a *Agent) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.signal:
		}
		a.busy(ctx)
	}
}

// busy samples until the queue is empty or ctx ends.
func (a *Agent) busy(ctx context.Context) {
	a.below = 0
	for ctx.Err() == nil {
		if !a.Step(ctx) {
			return
		}
		select {
		case <-a.signal: // already busy: the next sample comes soon enough
		default:
		}
		if !clock.Sleep(ctx, a.o.Clock, a.o.Interval, nil) {
			return
		}
	}
}

// Step takes one sample and acts on it, as Run does every Interval while
// the queue is busy: it reads the depth, shows the sample to the policy if
// it is an Observer, grows the pool to the target at once, and shrinks it
// when ShrinkAfter samples in a row have asked for fewer tasks. It reports
// whether the queue still holds work (false once the depth is zero or ctx
// has ended; a failed read counts as work, so sampling goes on).
//
// Step is for callers that drive the agent themselves instead of Run, such
// as the simulator (internal/sim), which calls it in virtual time. It must
// not be called while Run runs.
func (a *Agent) Step(ctx context.Context) bool {
	depth, err := a.pool.Depth(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		a.o.Logger.Warn("scaling: reading the queue depth failed", zap.Error(err))
		return true
	}
	cur := a.pool.ActiveTasks()
	if obs, ok := a.policy.(Observer); ok {
		obs.Observe(Sample{At: a.o.Clock.Now(), Depth: depth, Tasks: cur, Drained: a.pool.Drained()})
	}
	if depth == 0 {
		a.below = 0
		if a.o.ShrinkWhenEmpty && cur > a.o.MinTasks {
			a.o.Logger.Debug("scaling: queue empty; shrinking the pool", zap.Int("tasks", cur), zap.Int("target", a.o.MinTasks))
			a.pool.Resize(a.o.MinTasks)
		}
		return false
	}
	target := a.Target(depth)
	switch {
	case target > cur:
		a.o.Logger.Debug("scaling: growing the pool", zap.Int("depth", depth), zap.Int("tasks", cur), zap.Int("target", target))
		a.pool.Resize(target)
		a.below = 0
	case target < cur:
		a.below++
		if a.below >= a.o.ShrinkAfter {
			a.o.Logger.Debug("scaling: shrinking the pool", zap.Int("depth", depth), zap.Int("tasks", cur), zap.Int("target", target))
			a.pool.Resize(target)
			a.below = 0
		}
	default:
		a.below = 0
	}
	return true
}
