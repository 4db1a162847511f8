package sim

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/scaling"
)

// The two-step dequeue post's loop, by its numbers.
const (
	// NaivePoll is how long the two-step dequeue post's loop sleeps after an empty get:
	// Thread.Sleep(1000).
	NaivePoll = time.Second
	// NaiveThreads is the Best Practices article's count of pollers in its cost example:
	// "200 threads deleting messages from the queue (or one thread in 200
	// copies of the working role)".
	NaiveThreads = 200
	// SeedFixedTasks is the fixed pool of the seed-fixed policy: the Best Practices article's
	// listener started with StartListener(16) and never resized. (The
	// seed leaves threadCount to the host; 16 is a plausible fixed choice,
	// between its static rules' 10 and 50.)
	SeedFixedTasks = 16
)

// Policy is one named listener configuration the simulator runs: how many
// dequeue tasks, how each gets and sleeps, and whether an agent resizes
// the pool. The built-in ones are listed by Builtin.
type Policy struct {
	// Name identifies the policy on the command line and in the report.
	Name string
	// About says in a line what the policy is.
	About string
	// Tasks is the number of dequeue tasks at the start.
	Tasks int
	// MinTasks and MaxTasks bound the pool when it resizes (defaults 1 and
	// listener.DefaultMaxTasks).
	MinTasks, MaxTasks int
	// BatchSize is the n of each get (1..32).
	BatchSize int
	// NewBatchThreshold: a task gets again once no more than this many of
	// its messages are still being handled (the listener's rule; 0 waits
	// for the whole batch, as the Best Practices article's PLINQ loop does).
	NewBatchThreshold int
	// FixedPoll, if set, is the sleep after every empty get: the two-step dequeue post's
	// Thread.Sleep(1000). Otherwise Idle's randomized exponential backoff.
	FixedPoll time.Duration
	// Idle is the Best Practices article's backoff (zero fields: scaling's defaults).
	Idle scaling.IdleBackoff
	// Stop applies the Best Practices article's QueueEmpty stop rule: a task whose delay has
	// reached Idle.Max stops unless it is the last one.
	Stop bool
	// Trigger makes producers notify on put: sleeping tasks wake at once
	// and the agent hears of the work; idle tasks back off up to
	// SafetyInterval instead of Idle.Max (the listener's rule).
	Trigger bool
	// SafetyInterval is the longest idle sleep with a trigger (default
	// listener.DefaultSafetyInterval).
	SafetyInterval time.Duration
	// TriggerFloor, with a trigger, keeps a woken task from getting sooner
	// than this after the empty get that put it to sleep: a trigger ends a
	// sleep at max(now, empty get + TriggerFloor), as adaptq's listener
	// does (min(idle.min, latency target/2)). 0 wakes it at once.
	TriggerFloor time.Duration
	// Pace, if set, is the listener's cadence (its latency target/2): after
	// a get that returned some messages but fewer than it asked for, the
	// task's next get waits until Pace after it, instead of coming back
	// empty at once. A trigger does not end the wait. 0: get again at once,
	// as the seeds' loops do.
	Pace time.Duration
	// Scaling, if set, makes the pool policy an Agent resizes the pool by
	// (a fresh one for each run, since policies such as SLA learn).
	Scaling func() scaling.Policy
	// Agent configures that agent (zero fields: scaling's defaults).
	Agent scaling.AgentOptions
	// CoalesceDeletes deletes a batch's messages with one DeleteBatch, as
	// adaptq's listener does: one call on a backend that deletes in
	// batches (Options.BatchDelete), one per message otherwise. Without it
	// each message is deleted by its own call, as in the source articles' loops.
	CoalesceDeletes bool
	// RateLimit, if set, is the listener's rate limit (messages a
	// second) and RateBurst its burst (0: scaling.DefaultRateBurst), on
	// the listener's scaling.RateGate: a task asks for no more messages
	// than it has tokens for, and waits for them first.
	RateLimit float64
	RateBurst int
	// Adaptive, if set, makes the concurrency adapt as the listener's
	// does (concurrency: auto) with the real scaling.AIMD: Options.
	// Concurrency (or Adaptive.Max) bounds it; a task gets when max(1,
	// min(limit, batch)/2) slots are free. Under it, a refusal by the downstream
	// (Options.Downstream) never counts towards poisoning.
	Adaptive *scaling.AIMDOptions
}

func (p Policy) withDefaults() Policy {
	if p.Tasks == 0 {
		p.Tasks = 1
	}
	if p.MinTasks == 0 {
		p.MinTasks = 1
	}
	if p.MaxTasks == 0 {
		p.MaxTasks = max(listener.DefaultMaxTasks, p.Tasks)
	}
	if p.BatchSize == 0 {
		p.BatchSize = queue.MaxBatchSize
	}
	p.Idle = p.Idle.WithDefaults()
	if p.SafetyInterval == 0 {
		p.SafetyInterval = listener.DefaultSafetyInterval
	}
	return p
}

// validate names the first bad field and its value.
func (p Policy) validate() error {
	bad := func(field string, v any, why string) error {
		return fmt.Errorf("sim: policy %q: %s: %v %s", p.Name, field, v, why)
	}
	switch {
	case p.Name == "":
		return fmt.Errorf("sim: a policy has no name")
	case p.BatchSize < 1 || p.BatchSize > queue.MaxBatchSize:
		return bad("batch_size", p.BatchSize, fmt.Sprintf("is outside 1..%d", queue.MaxBatchSize))
	case p.NewBatchThreshold < 0 || p.NewBatchThreshold >= p.BatchSize:
		return bad("new_batch_threshold", p.NewBatchThreshold, fmt.Sprintf("is outside 0..batch_size-1 (%d)", p.BatchSize-1))
	case p.MinTasks < 1:
		return bad("min_tasks", p.MinTasks, "is below 1")
	case p.MaxTasks < p.MinTasks:
		return bad("max_tasks", p.MaxTasks, fmt.Sprintf("is below min_tasks %d", p.MinTasks))
	case p.Tasks < p.MinTasks || p.Tasks > p.MaxTasks:
		return bad("tasks", p.Tasks, fmt.Sprintf("is outside min_tasks..max_tasks (%d..%d)", p.MinTasks, p.MaxTasks))
	case p.Pace < 0:
		return bad("pace", p.Pace, "is negative")
	case p.FixedPoll < 0:
		return bad("fixed_poll", p.FixedPoll, "is negative")
	case math.IsNaN(p.RateLimit):
		return bad("rate_limit", p.RateLimit, "is not a number")
	case p.RateLimit < 0 || p.RateBurst < 0:
		return bad("rate_limit", fmt.Sprintf("%v/s burst %d", p.RateLimit, p.RateBurst), "is negative")
	case p.Trigger && p.SafetyInterval < p.Idle.Max:
		return bad("safety_interval", p.SafetyInterval, fmt.Sprintf("is below idle.max %s", p.Idle.Max))
	}
	if err := p.Idle.Validate(); err != nil {
		return fmt.Errorf("sim: policy %q: %w", p.Name, err)
	}
	if p.Adaptive != nil {
		if err := p.Adaptive.Validate(); err != nil {
			return fmt.Errorf("sim: policy %q: adaptive: %w", p.Name, err)
		}
	}
	return nil
}

// The built-in policies' names.
const (
	PolicyNaive1          = "naive-1"
	PolicyNaive200        = "naive-200"
	PolicySeedFixed       = "seed-fixed"
	PolicySeedAdaptive    = "seed-adaptive"
	PolicyAdaptq          = "adaptq"
	PolicyAdaptqNoTrigger = "adaptq-poll"
	PolicyAdaptqRate      = "adaptq-rate"
	PolicyAdaptqAuto      = "adaptq-auto"
)

// DefaultRateLimit is the adaptq-rate policy's limit: 100 messages a
// second (a downstream's published quota, say).
const DefaultRateLimit = 100

// AdaptqRate is adaptq's policy (with the trigger) limited to perSecond
// messages a second, with the default burst.
func AdaptqRate(name string, slaTarget time.Duration, perSecond float64) Policy {
	p := Adaptq(name, slaTarget, listener.DefaultLatencyTargetBilled, true)
	p.RateLimit = perSecond
	p.About = fmt.Sprintf("adaptq with rate_limit: {per_second: %v} (a get asks only for the tokens it has)", perSecond)
	return p
}

// AdaptqAuto is adaptq's policy (with the trigger) with concurrency: auto
// between lo and hi (hi 0: Options.Concurrency, or 64).
func AdaptqAuto(name string, slaTarget time.Duration, lo, hi int) Policy {
	p := Adaptq(name, slaTarget, listener.DefaultLatencyTargetBilled, true)
	p.Adaptive = &scaling.AIMDOptions{Min: lo, Max: hi}
	p.About = fmt.Sprintf("adaptq with concurrency: auto (AIMD from %d; +1/limit a success, ×%.1f on overload)", max(lo, 1), scaling.DefaultAIMDBackoff)
	return p
}

// Builtin returns the policies the report compares, in order. target is
// the SLA policy's pickup-latency target (scaling.DefaultSLATarget if 0).
//
//   - naive-1, naive-200: the two-step dequeue post's loop (get one, process, delete; sleep
//     1 s when the queue is empty) with one thread, and with the 200 of
//     the Best Practices article's cost example.
//   - seed-fixed: the Best Practices article's listener with a fixed pool of 16 tasks, batch
//     gets of 32 and the randomized exponential backoff, never stopping.
//   - seed-adaptive: the Best Practices article's adaptive listener: idle tasks stop down to
//     one (the QueueEmpty stop rule), and on WorkDetected an agent sizes
//     the pool by the article's static rules (10/50/100 tasks).
//   - adaptq: a push trigger (producers notify on put; idle tasks back off
//     to the 5-minute safety interval; a woken task gets no sooner than
//     100 ms after its last empty get, and a task whose get drained the
//     queue waits 100 ms before the next, so a stream of notifying puts is
//     fetched in batches: the billed backend's 200 ms latency target) and
//     the SLA pool policy, with adaptq's listener (fetch at the new-batch
//     threshold, coalesced deletes) and agent (the pool back to one task as
//     soon as the queue is empty).
//   - adaptq-poll: adaptq without the trigger, for comparison.
func Builtin(target time.Duration) []Policy {
	if target <= 0 {
		target = scaling.DefaultSLATarget
	}
	return []Policy{
		{
			Name: PolicyNaive1, About: "the two-step dequeue post: get 1, process, delete; sleep 1 s when empty; 1 thread",
			Tasks: 1, BatchSize: 1, FixedPoll: NaivePoll,
		},
		{
			Name: PolicyNaive200, About: "the two-step dequeue post's loop × 200 threads (the Best Practices article's cost example)",
			Tasks: NaiveThreads, BatchSize: 1, FixedPoll: NaivePoll,
		},
		{
			Name: PolicySeedFixed, About: "the Best Practices article: 16 tasks, gets of 32, randomized exponential backoff, no stopping",
			Tasks: SeedFixedTasks,
		},
		{
			Name: PolicySeedAdaptive, About: "the Best Practices article: idle tasks stop down to 1; static rules (10/50/100) on WorkDetected",
			Tasks: 1, Stop: true,
			Scaling: func() scaling.Policy { return scaling.SeedRules },
		},
		Adaptq(PolicyAdaptq, target, listener.DefaultLatencyTargetBilled, true),
		Adaptq(PolicyAdaptqNoTrigger, target, listener.DefaultLatencyTargetBilled, false),
		AdaptqRate(PolicyAdaptqRate, target, DefaultRateLimit),
		AdaptqAuto(PolicyAdaptqAuto, target, 1, 0),
	}
}

// Adaptq is adaptq's listener and agent as a policy: the SLA pool policy
// with pool target slaTarget, and a latency target whose half (the
// cadence) paces gets after one that drained the queue, is the trigger
// floor, idle.min and idle.delta, as the listener derives them; with a
// trigger or without.
func Adaptq(name string, slaTarget, latencyTarget time.Duration, trigger bool) Policy {
	c := max(latencyTarget/2, time.Nanosecond)
	p := Policy{
		Name: name,
		About: fmt.Sprintf("adaptq without the trigger: latency target %s (gets paced at %s), backoff to 1 min, SLA %s pool",
			latencyTarget, c, slaTarget),
		Tasks: 1, Stop: true, NewBatchThreshold: queue.MaxBatchSize / 2, CoalesceDeletes: true,
		Idle:    scaling.IdleBackoff{Min: c, Delta: c},
		Pace:    c,
		Agent:   scaling.AgentOptions{ShrinkWhenEmpty: true},
		Scaling: func() scaling.Policy { return &scaling.SLA{Target: slaTarget, MaxTasks: listener.DefaultMaxTasks} },
	}
	if trigger {
		p.Trigger, p.TriggerFloor = true, c
		p.About = fmt.Sprintf("adaptq: push trigger, latency target %s (%s floor and pace), 5 min safety poll, SLA %s pool",
			latencyTarget, c, slaTarget)
	}
	return p
}

// DefaultPolicies are the names the report shows when none are asked for:
// the four configurations of the comparison (the naive loop both ways),
// and adaptq without its trigger beside adaptq with it.
var DefaultPolicies = []string{PolicyNaive1, PolicyNaive200, PolicySeedFixed, PolicySeedAdaptive, PolicyAdaptq, PolicyAdaptqNoTrigger}

// Lookup returns the built-in policies called names, in that order; an
// unknown name is an error that lists the known ones.
func Lookup(names []string, target time.Duration) ([]Policy, error) {
	all := Builtin(target)
	byName := map[string]Policy{}
	known := make([]string, 0, len(all))
	for _, p := range all {
		byName[p.Name] = p
		known = append(known, p.Name)
	}
	sort.Strings(known)
	out := make([]Policy, 0, len(names))
	for _, n := range names {
		p, ok := byName[n]
		if !ok {
			return nil, fmt.Errorf("sim: policy %q is not one of %s", n, strings.Join(known, ", "))
		}
		out = append(out, p)
	}
	return out, nil
}
