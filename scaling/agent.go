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
	Clock       clock.Clock
	Logger      *zap.Logger
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

// WorkDetected tells the agent that an idle task found work (seed 002's
// QueueWorkDetected). It never blocks; signals while one is pending merge.
func (a *Agent) WorkDetected() {
	select {
	case a.signal <- struct{}{}:
	default:
	}
}

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
	below := 0
	for ctx.Err() == nil {
		depth, err := a.pool.Depth(ctx)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			a.o.Logger.Warn("scaling: reading the queue depth failed", zap.Error(err))
		case depth == 0:
			return
		default:
			target := a.Target(depth)
			cur := a.pool.ActiveTasks()
			switch {
			case target > cur:
				a.o.Logger.Debug("scaling: growing the pool", zap.Int("depth", depth), zap.Int("tasks", cur), zap.Int("target", target))
				a.pool.Resize(target)
				below = 0
			case target < cur:
				below++
				if below >= a.o.ShrinkAfter {
					a.o.Logger.Debug("scaling: shrinking the pool", zap.Int("depth", depth), zap.Int("tasks", cur), zap.Int("target", target))
					a.pool.Resize(target)
					below = 0
				}
			default:
				below = 0
			}
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
