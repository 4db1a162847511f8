package scaling

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// SLA defaults.
const (
	// DefaultSLATarget is the pickup latency an SLA policy aims for when
	// none is given: 30 s, the default visibility timeout (the message visibility article), so a
	// message is picked up well before one that was fetched and lost would
	// reappear.
	DefaultSLATarget = 30 * time.Second
	// DefaultSLAAlpha is the weight of the newest drain-rate observation in
	// the moving average. At the agent's 5 s DefaultSampleInterval an
	// observation's weight halves in two samples, so a new handler cost is
	// learnt within one 30 s target while one slow interval moves the
	// estimate by less than a third.
	DefaultSLAAlpha = 0.3
	// DefaultSLAShrinkMargin is the hysteresis: the pool grows to the
	// fewest tasks that meet the target, but shrinks only to the fewest
	// that meet DefaultSLAShrinkMargin × the target, so an estimate off by
	// up to 20% (the width of the Best Practices article's jitter band, 0.8..1.2) cannot make
	// the pool flap between two counts.
	DefaultSLAShrinkMargin = 0.8
	// DefaultSLAMinInterval is the shortest interval between two samples
	// that yields a rate; closer samples (an agent woken twice in a moment)
	// are merged into the next interval, since a few messages over a few
	// milliseconds say nothing about a rate.
	DefaultSLAMinInterval = time.Second
	// DefaultSLABusyDepth is how many messages per task the queue must
	// hold at both ends of an interval for the interval to teach the rate:
	// a full batch each (the Best Practices article: 32 per get), so that every task had work
	// and the tasks, not the arrivals, set the pace. A pool that keeps up
	// with a trickle drains only what arrives, which says nothing about
	// what it could drain.
	DefaultSLABusyDepth = DefaultMessagesPerTask
)

// SLA sizes a pool to meet a pickup-latency target: by Little's law a
// backlog of depth messages, drained by tasks tasks at rate messages a
// second each, waits depth / (tasks × rate), so the pool needs
// ceil(depth / (rate × Target)) tasks. The rate per task is learnt from
// the agent's samples (SLA is an Observer): the growth of the pool's
// Drained count over each interval, divided by the interval and the tasks
// that ran through it, averaged with weight Alpha. Only busy intervals
// count, those in which the queue held at least BusyDepth messages per
// task at both ends, so that the pool, not the arrivals, set the pace: an
// idle or half-idle pool drains what arrives, whatever it could do. An
// interval that starts busy and ends with the queue empty gives a lower
// bound of the rate, which may raise the estimate but never lowers it;
// that is how a burst drained within one sample interval still teaches
// something. Until a rate is known, Fallback decides.
//
// The answer is clamped to [MinTasks, MaxTasks]. It grows the pool as soon
// as the target calls for it. It shrinks it only while the depth is not
// falling, and only to a count that meets ShrinkMargin × Target: a pool
// draining a burst keeps its size until the burst is gone, because the
// messages at the burst's tail have waited since it arrived and a smaller
// pool would push them past the target. The agent's ShrinkAfter adds its
// own hysteresis in samples, and the listener's idle rule shrinks the pool
// once the queue is empty. When MaxTasks cannot meet the target (the
// handler is too slow for the backlog), the answer is MaxTasks.
//
// Use NewSLA, or a literal &SLA{…} whose zero fields take the defaults.
// An SLA is safe for concurrent use.
type SLA struct {
	// Target is the pickup latency to meet (DefaultSLATarget if zero).
	Target time.Duration
	// MinTasks and MaxTasks clamp the answer (MinTasks at least 1;
	// MaxTasks 0: no upper limit).
	MinTasks, MaxTasks int
	// Alpha is the moving average's weight, in (0, 1] (DefaultSLAAlpha if
	// zero).
	Alpha float64
	// ShrinkMargin, in (0, 1], is the share of Target a smaller pool must
	// meet before the policy shrinks to it (DefaultSLAShrinkMargin if
	// zero).
	ShrinkMargin float64
	// MinInterval is the shortest sampling interval that yields a rate
	// (DefaultSLAMinInterval if zero).
	MinInterval time.Duration
	// BusyDepth is the depth per task, at both ends of an interval, that
	// makes it a busy one (DefaultSLABusyDepth if zero).
	BusyDepth int
	// Fallback answers until a rate is known (default: Proportional, one
	// task per DefaultMessagesPerTask waiting).
	Fallback Policy

	mu       sync.Mutex
	rate     float64 // messages per second per task; valid when known
	known    bool
	anchor   Sample // start of the interval being measured
	anchored bool
	last     Sample // the newest sample
	falling  bool   // the depth fell between the last two samples
	tasks    int    // the pool's size at the last sample; 0 before any
}

// SLAOptions are NewSLA's optional settings; see SLA's fields.
type SLAOptions struct {
	MinTasks, MaxTasks int
	Alpha              float64
	ShrinkMargin       float64
	MinInterval        time.Duration
	BusyDepth          int
	Fallback           Policy
}

// NewSLA returns an SLA policy for target and checks its settings.
func NewSLA(target time.Duration, o SLAOptions) (*SLA, error) {
	p := &SLA{
		Target: target, MinTasks: o.MinTasks, MaxTasks: o.MaxTasks,
		Alpha: o.Alpha, ShrinkMargin: o.ShrinkMargin, MinInterval: o.MinInterval, BusyDepth: o.BusyDepth, Fallback: o.Fallback,
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// Validate names the first bad setting and its value.
func (p *SLA) Validate() error {
	switch {
	case p.Target < 0:
		return fmt.Errorf("scaling: sla target %s is negative", p.Target)
	case p.MinTasks < 0:
		return fmt.Errorf("scaling: sla min_tasks %d is negative", p.MinTasks)
	case p.MaxTasks < 0:
		return fmt.Errorf("scaling: sla max_tasks %d is negative", p.MaxTasks)
	case p.MaxTasks > 0 && p.MaxTasks < p.MinTasks:
		return fmt.Errorf("scaling: sla max_tasks %d is below min_tasks %d", p.MaxTasks, p.MinTasks)
	case p.Alpha < 0 || p.Alpha > 1 || math.IsNaN(p.Alpha):
		return fmt.Errorf("scaling: sla alpha %v is outside (0, 1]", p.Alpha)
	case p.ShrinkMargin < 0 || p.ShrinkMargin > 1 || math.IsNaN(p.ShrinkMargin):
		return fmt.Errorf("scaling: sla shrink_margin %v is outside (0, 1]", p.ShrinkMargin)
	case p.MinInterval < 0:
		return fmt.Errorf("scaling: sla min_interval %s is negative", p.MinInterval)
	case p.BusyDepth < 0:
		return fmt.Errorf("scaling: sla busy_depth %d is negative", p.BusyDepth)
	}
	return nil
}

func (p *SLA) target() time.Duration { return orDefault(p.Target, DefaultSLATarget) }

func (p *SLA) alpha() float64 { return orDefault(p.Alpha, DefaultSLAAlpha) }

func (p *SLA) margin() float64 { return orDefault(p.ShrinkMargin, DefaultSLAShrinkMargin) }

func (p *SLA) minInterval() time.Duration { return orDefault(p.MinInterval, DefaultSLAMinInterval) }

func (p *SLA) busyDepth() int { return orDefault(p.BusyDepth, DefaultSLABusyDepth) }

func (p *SLA) clamp(n int) int { return Clamp(n, max(p.MinTasks, 1), p.MaxTasks) }

// Observe learns from one sample: the interval since the previous one
// yields a drain rate per task when it was busy (BusyDepth messages per
// task at both ends) and lasted at least MinInterval, and a lower bound of
// the rate when it started busy and ended with the queue empty.
func (p *SLA) Observe(s Sample) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.anchored && s.At.After(p.last.At) {
		p.falling = s.Depth < p.last.Depth
	}
	p.last, p.tasks = s, s.Tasks
	if !p.anchored || s.At.Before(p.anchor.At) || s.Drained < p.anchor.Drained {
		// The first sample, or a clock or counter that went back (a new
		// pool): start measuring afresh.
		p.anchor, p.anchored, p.falling = s, true, false
		return
	}
	dt := s.At.Sub(p.anchor.At)
	if dt < p.minInterval() {
		// Too short to measure: merge it into the next interval, unless the
		// queue was found empty, which spoils the interval anyway.
		if s.Depth == 0 {
			p.anchor = s
		}
		return
	}
	prev := p.anchor
	p.anchor = s
	busy := p.busyDepth() * s.Tasks
	if s.Tasks <= 0 || prev.Depth < busy || prev.Depth == 0 {
		return // some tasks may have waited for work
	}
	r := float64(s.Drained-prev.Drained) / dt.Seconds() / float64(s.Tasks)
	switch {
	case s.Depth >= busy:
		p.add(r)
	case s.Depth == 0 && r > 0 && (!p.known || r > p.rate):
		// The pool emptied a busy queue within the interval and then
		// waited: r is a lower bound of its rate. Raise the estimate to it
		// (a burst that drains within one interval teaches something),
		// never lower it.
		p.rate, p.known = r, true
	}
}

// add folds one rate observation into the moving average. A rate is known
// only once some messages have drained: an interval with none (handlers
// still running their first batch) can lower an estimate, not start one.
func (p *SLA) add(r float64) {
	switch {
	case p.known:
		p.rate += p.alpha() * (r - p.rate)
	case r > 0:
		p.rate, p.known = r, true
	}
}

// Rate is the learnt drain rate in messages per second per task, and
// whether one is known yet.
func (p *SLA) Rate() (perTask float64, known bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rate, p.known
}

// Tasks is the pool size that meets Target for depth: clamped to
// [MinTasks, MaxTasks], Fallback's answer while no rate is known, else
// ceil(depth / (rate × Target)) when that is more than the pool has now;
// when it is fewer, the pool keeps its size while the depth is falling and
// otherwise shrinks to ceil(depth / (rate × ShrinkMargin × Target)).
func (p *SLA) Tasks(depth int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if depth <= 0 {
		return p.clamp(0)
	}
	if !p.known || p.rate <= 0 {
		fb := p.Fallback
		if fb == nil {
			fb = Proportional{PerTask: DefaultMessagesPerTask}
		}
		return p.clamp(fb.Tasks(depth))
	}
	target := p.target().Seconds()
	grow := tasksFor(depth, p.rate, target)
	if p.tasks <= 0 || grow >= p.tasks {
		return p.clamp(grow)
	}
	if p.falling {
		return p.clamp(p.tasks) // draining a backlog: see it through
	}
	// Fewer tasks would do: shrink only as far as still meets the target
	// with the margin to spare.
	shrink := tasksFor(depth, p.rate, p.margin()*target)
	return p.clamp(min(shrink, p.tasks))
}

// tasksFor is ceil(depth / (rate × seconds)), saturating at MaxInt32.
func tasksFor(depth int, rate, seconds float64) int {
	n := math.Ceil(float64(depth) / (rate * seconds))
	if n > math.MaxInt32 || math.IsNaN(n) {
		return math.MaxInt32
	}
	return int(n)
}

// orDefault is v, or d where v is not positive (unset).
func orDefault[T int | float64 | time.Duration](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}
