package scaling

import (
	"fmt"
	"math"
	"time"
)

// Instances defaults.
const (
	// DefaultTargetDrainTime is how soon the instance signal asks for a
	// backlog to be gone: one minute, the window the drain rate is measured
	// over, so the signal never plans further ahead than it can see.
	DefaultTargetDrainTime = time.Minute
	// DefaultMinInstances keeps one instance running: the signal is served
	// by the workers themselves, so with none left nobody would answer the
	// autoscaler (scaling to zero needs a scaler that reads the queue:
	// `adaptq scaler`, DesiredOrZero).
	DefaultMinInstances = 1
)

// Basis says what an Instances answer was computed from.
type Basis string

// The bases of an answer.
const (
	// BasisEmpty: the queue holds nothing; the answer is Min.
	BasisEmpty Basis = "empty"
	// BasisDrainRate: the drain rate measured per instance.
	BasisDrainRate Basis = "drain_rate"
	// BasisMessagesPerInstance: no rate was measured (or the instance was
	// not busy throughout, so the rate said what arrived, not what it can
	// drain); MessagesPerInstance decided.
	BasisMessagesPerInstance Basis = "messages_per_instance"
	// BasisEmptyUnconfirmed: the queue read zero, but not for long enough
	// to believe it (an approximate count, Instances.DesiredOrZero); the
	// answer stays at least one.
	BasisEmptyUnconfirmed Basis = "empty_unconfirmed"
)

// Instances is the dynamic scaling agent of the Best Practices article
// across processes: it answers how many worker instances (processes,
// pods) a queue needs, for an autoscaler outside the process such as KEDA.
// Where Policy sizes the pool of dequeue tasks in one process, Instances
// sizes the number of processes.
//
// By Little's law a backlog of depth messages is drained within
// TargetDrainTime by ceil(depth / (rate × TargetDrainTime)) instances that
// each delete rate messages a second. Until a rate is known the answer is
// ceil(depth / MessagesPerInstance), Proportional's rule one level up. The
// answer is clamped to [Min, Max]; an empty queue gets Min.
type Instances struct {
	// TargetDrainTime is how soon a backlog should be gone
	// (DefaultTargetDrainTime if zero).
	TargetDrainTime time.Duration
	// MessagesPerInstance is the backlog one instance is given while no
	// drain rate is known (required, at least 1).
	MessagesPerInstance int
	// Min and Max clamp the answer; Max 0 means no upper limit.
	Min, Max int
}

// Validate checks the fields, naming the bad one.
func (p Instances) Validate() error {
	switch {
	case p.TargetDrainTime < 0:
		return fmt.Errorf("scaling: target_drain_time %s is negative", p.TargetDrainTime)
	case p.MessagesPerInstance < 1:
		return fmt.Errorf("scaling: messages_per_instance %d is below 1", p.MessagesPerInstance)
	case p.Min < 0:
		return fmt.Errorf("scaling: min %d is negative", p.Min)
	case p.Max < 0:
		return fmt.Errorf("scaling: max %d is negative (0: no limit)", p.Max)
	case p.Max > 0 && p.Max < p.Min:
		return fmt.Errorf("scaling: max %d is below min %d", p.Max, p.Min)
	}
	return nil
}

// Desired is the number of instances a backlog of depth messages needs,
// given the drain rate one instance achieves (messages a second; 0 if not
// known), and what the answer was computed from.
func (p Instances) Desired(depth int, ratePerInstance float64) (int, Basis) {
	if depth <= 0 {
		return Clamp(0, p.Min, p.Max), BasisEmpty
	}
	target := p.TargetDrainTime
	if target <= 0 {
		target = DefaultTargetDrainTime
	}
	if ratePerInstance > 0 && !math.IsInf(ratePerInstance, 0) {
		perInstance := ratePerInstance * target.Seconds()
		return Clamp(ceilDiv(float64(depth), perInstance), p.Min, p.Max), BasisDrainRate
	}
	per := max(p.MessagesPerInstance, 1)
	return Clamp(ceilDiv(float64(depth), float64(per)), p.Min, p.Max), BasisMessagesPerInstance
}

// ceilDiv is ceil(a / b) as an int, saturating at math.MaxInt32.
func ceilDiv(a, b float64) int {
	n := math.Ceil(a / b)
	if n > math.MaxInt32 || math.IsNaN(n) {
		return math.MaxInt32
	}
	return int(n)
}
