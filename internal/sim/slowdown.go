package sim

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/scaling"
)

// The downstream-slowdown scenario's numbers (`adaptq simulate --scenario
// slowdown`).
const (
	// SlowdownRate is the arrival rate: 300 messages a second.
	SlowdownRate = 300
	// SlowdownCapacity is the downstream's healthy capacity: 40 calls at
	// once, 400 a second at the default 100 ms service time; it halves to
	// 20 (200 a second, below the arrival rate) for the middle phase.
	SlowdownCapacity = 40
	// SlowdownPhase is each of the three phases' length: healthy, slow,
	// healthy again.
	SlowdownPhase = 5 * time.Minute
	// SlowdownService is each call's service time.
	SlowdownService = 100 * time.Millisecond
	// SlowdownConcurrency is the fixed policy's concurrency, and the
	// adaptive one's bound: the listener's default (64).
	SlowdownConcurrency = listener.DefaultConcurrency
	// SlowdownRateLimit is the rate-limited policy's limit: 190 a second,
	// just below what the slowed downstream serves, the limit an operator
	// must pick to be safe through the slowdown.
	SlowdownRateLimit = 190
)

// Slowdown is the downstream-slowdown scenario's outcome.
type Slowdown struct {
	Rate                  float64
	Capacity, Concurrency int
	Phase, Service        time.Duration
	MaxDequeueCount       int
	Report                Report
}

// RunSlowdown runs adaptq's listener three ways against a downstream whose
// capacity halves and recovers, under a steady arrival rate: with the
// fixed default concurrency (64), with concurrency: auto (1..64), and with
// a fixed concurrency under a rate limit set for the slow phase. A refused
// call fails its message, which comes back after its visibility timeout;
// with the fixed concurrency it counts towards poisoning.
//
// phase is each phase's length (0: SlowdownPhase).
func RunSlowdown(ctx context.Context, o Options, phase time.Duration) (Slowdown, error) {
	if phase <= 0 {
		phase = SlowdownPhase
	}
	if o.Service == 0 {
		o.Service = SlowdownService
	}
	if o.Concurrency == 0 {
		o.Concurrency = SlowdownConcurrency
	}
	o.BatchDelete = true
	o.Downstream = &Downstream{Capacity: SlowdownCapacity, Changes: []CapacityChange{
		{At: phase, Capacity: SlowdownCapacity / 2},
		{At: 2 * phase, Capacity: SlowdownCapacity},
	}}
	target := scaling.DefaultSLATarget
	fixed := Adaptq("fixed", target, listener.DefaultLatencyTargetFree, true)
	fixed.About = fmt.Sprintf("concurrency: %d (the default)", o.Concurrency)
	auto := AdaptqAuto("auto", target, 1, 0)
	auto.Idle, auto.Pace, auto.TriggerFloor = fixed.Idle, fixed.Pace, fixed.TriggerFloor
	auto.About = fmt.Sprintf("concurrency: auto (1..%d)", o.Concurrency)
	rated := AdaptqRate("rate-limited", target, SlowdownRateLimit)
	rated.Idle, rated.Pace, rated.TriggerFloor = fixed.Idle, fixed.Pace, fixed.TriggerFloor
	rated.About = fmt.Sprintf("concurrency: %d, rate_limit: {per_second: %d}", o.Concurrency, SlowdownRateLimit)
	w := Workload{Name: "slowdown", Phases: []Phase{{Duration: 3 * phase, Rate: SlowdownRate}}}
	rep, err := Run(ctx, w, []Policy{fixed, auto, rated}, o)
	if err != nil {
		return Slowdown{}, err
	}
	mdc := o.MaxDequeueCount
	if mdc == 0 {
		mdc = listener.DefaultMaxDequeueCount
	}
	return Slowdown{Rate: SlowdownRate, Capacity: SlowdownCapacity, Concurrency: o.Concurrency,
		Phase: phase, Service: rep.Service, MaxDequeueCount: mdc, Report: rep}, nil
}

// WriteTable prints the scenario and one row per policy.
func (s Slowdown) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "downstream slowdown: %v msgs/s for %s; the downstream serves %d calls at once (%s each), %d from %s to %s, then %d again; a refused call (503) fails its message, which comes back after its visibility timeout; max_dequeue_count %d\n\n",
		s.Rate, fmtDuration(3*s.Phase), s.Capacity, s.Service, s.Capacity/2, fmtDuration(s.Phase), fmtDuration(2*s.Phase), s.Capacity, s.MaxDequeueCount)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tprocessed\tleft\trefused calls\tpoisoned\tp50 pickup\tp99 pickup\tp99 put→done\tcalls/msg\tmean limit\t")
	for _, r := range s.Report.Results {
		lim := "—"
		if r.MeanLimit > 0 {
			lim = fmt.Sprintf("%.1f", r.MeanLimit)
		}
		cpm := float64(r.Calls+r.Puts) / float64(max(r.Processed, 1))
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%.3f\t%s\t\n", r.Policy, r.Processed, r.Left, r.Refused, r.Poisoned,
			fmtLatency(r.P50), fmtLatency(r.P99), fmtLatency(r.P99Done), cpm, lim)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, r := range s.Report.Results {
		fmt.Fprintf(w, "  %-13s %s\n", r.Policy, r.About)
	}
	return nil
}
