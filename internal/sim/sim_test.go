package sim_test

import (
	"context"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/sim"
)

func lookup(t *testing.T, names ...string) []sim.Policy {
	t.Helper()
	ps, err := sim.Lookup(names, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func run(t *testing.T, w sim.Workload, ps []sim.Policy, o sim.Options) sim.Report {
	t.Helper()
	rep, err := sim.Run(context.Background(), w, ps, o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func result(t *testing.T, rep sim.Report, name string) sim.Result {
	t.Helper()
	r, ok := rep.Result(name)
	if !ok {
		t.Fatalf("no result for %s", name)
	}
	return r
}

// TestSeedCostFigures reproduces the Best Practices article's own numbers: a poller that
// sleeps 1 s after every empty get makes 79,200 calls in a day's 22 idle
// hours, $2.38 a month at $0.01 per 10,000; 200 of them cost 200 times as
// much. The article prints that as "$457.2", but its formula gives
// 200 × 79,200 / 10,000 × $0.01 × 30 = $475.20: the article transposed two
// digits, so the test asserts $475.20.
func TestSeedCostFigures(t *testing.T) {
	t.Parallel()
	rep := run(t, sim.IdleDay(), lookup(t, sim.PolicyNaive1, sim.PolicySeedAdaptive, sim.PolicyAdaptq), sim.Options{})
	r := result(t, rep, sim.PolicyNaive1)
	if r.Calls != 79_200 || r.IdleCalls != 79_200 || r.ByKind["get_empty"] != 79_200 {
		t.Errorf("naive-1: %d calls (%d idle, by kind %v), want exactly 79,200 empty gets", r.Calls, r.IdleCalls, r.ByKind)
	}
	if math.Abs(r.MonthlyCost-2.376) > 1e-9 {
		t.Errorf("naive-1: $%v a month, want $2.376", r.MonthlyCost)
	}
	if got := math.Round(r.MonthlyCost*100) / 100; got != 2.38 {
		t.Errorf("one poller rounds to $%.2f a month, want the article's $2.38", got)
	}

	// 200 pollers. Under the race detector their 15.84 million calls take
	// 20 s of the test budget (the simulator runs on one goroutine, so the
	// detector has nothing to check in them): there the test simulates one
	// of the 22 idle hours, whose count must be exactly 200 × 3,600, and
	// prices 22 of them.
	idle, hours := sim.IdleDay(), int64(1)
	if raceEnabled {
		idle.Phases = []sim.Phase{{Duration: time.Hour}}
	} else {
		hours = 22
	}
	r = result(t, run(t, idle, lookup(t, sim.PolicyNaive200), sim.Options{}), sim.PolicyNaive200)
	if want := 200 * 3600 * hours; r.Calls != want || r.IdleCalls != want {
		t.Errorf("naive-200 over %d idle hours: %d calls (%d idle), want exactly %d", hours, r.Calls, r.IdleCalls, want)
	}
	if cost := r.MonthlyCost * 22 / float64(hours); math.Abs(cost-475.2) > 1e-9 {
		t.Errorf("naive-200: $%v a month, want $475.20 (the article's misprinted \"$457.2\")", cost)
	}

	// The article's remedies: one task backing off to a minute polls about
	// 22 × 60 times; with a trigger, once every 5 minutes: 22 × 12.
	if r := result(t, rep, sim.PolicySeedAdaptive); r.IdleCalls < 22*60 || r.IdleCalls > 22*60+20 {
		t.Errorf("seed-adaptive made %d idle calls, want about %d (one a minute)", r.IdleCalls, 22*60)
	}
	if r := result(t, rep, sim.PolicyAdaptq); r.IdleCalls < 22*12 || r.IdleCalls > 22*12+20 || r.Calls != r.IdleCalls {
		t.Errorf("adaptq made %d calls (%d idle), want about %d idle ones (one per 5 minutes)", r.Calls, r.IdleCalls, 22*12)
	}
}

// seedDay is the default report: the Best Practices article's scenario, one day, the
// default policies. Under the race detector naive-200's 17 million calls
// take minutes, not seconds; the simulator runs on one goroutine, so the
// detector has nothing to find in them, and TestSeedCostFigures covers
// 200 pollers.
func seedDay(t *testing.T) (sim.Workload, []string) {
	names := sim.DefaultPolicies
	if raceEnabled {
		names = nil
		for _, n := range sim.DefaultPolicies {
			if n != sim.PolicyNaive200 {
				names = append(names, n)
			}
		}
	}
	return sim.SeedScenario(sim.DefaultSeed, 1), names
}

func TestSeedScenarioDay(t *testing.T) {
	t.Parallel()
	w, names := seedDay(t)
	start := time.Now()
	rep := run(t, w, lookup(t, names...), sim.Options{})
	took := time.Since(start)
	t.Logf("a simulated day of %d policies took %s", len(names), took)
	// How fast is reported, not asserted: timings stay out of pass/fail.
	if rep.Length != 24*time.Hour || rep.Messages != w.Messages() {
		t.Fatalf("report of %s and %d messages, want 24h and %d", rep.Length, rep.Messages, w.Messages())
	}
	for _, r := range rep.Results {
		if r.Processed != rep.Messages || r.Left != 0 || r.Puts != rep.Messages {
			t.Errorf("%s: %d of %d messages processed (%d put, %d left)", r.Policy, r.Processed, rep.Messages, r.Puts, r.Left)
		}
		if d := r.ByKind["delete"]; d != rep.Messages {
			t.Errorf("%s: %d delete calls for %d messages, want one each (Azure-like deletes)", r.Policy, d, rep.Messages)
		}
	}
	naive := result(t, rep, sim.PolicyNaive1)
	fixed := result(t, rep, sim.PolicySeedFixed)
	adaptive := result(t, rep, sim.PolicySeedAdaptive)
	adaptq := result(t, rep, sim.PolicyAdaptq)

	t.Run("the adaptive listener returns to one task when idle", func(t *testing.T) {
		if adaptive.PeakTasks < 10 || adaptive.EndTasks != 1 {
			t.Errorf("seed-adaptive: peak %d tasks, %d at the end; want the static rules' ≥ 10, then 1", adaptive.PeakTasks, adaptive.EndTasks)
		}
		if fixed.PeakTasks != sim.SeedFixedTasks || fixed.EndTasks != sim.SeedFixedTasks {
			t.Errorf("seed-fixed: %d..%d tasks, want %d throughout", fixed.PeakTasks, fixed.EndTasks, sim.SeedFixedTasks)
		}
		if adaptq.EndTasks != 1 {
			t.Errorf("adaptq ends with %d tasks; want 1", adaptq.EndTasks)
		}
	})
	t.Run("a trigger beats polling on latency", func(t *testing.T) {
		for _, r := range []sim.Result{adaptq} {
			if r.P99 >= adaptive.P99 || r.P99 > time.Second {
				t.Errorf("%s: p99 %s, want under a second and under seed-adaptive's %s", r.Policy, r.P99, adaptive.P99)
			}
		}
		if adaptive.P99 < 10*time.Second {
			t.Errorf("seed-adaptive: p99 %s; its one task polling once a minute should leave bursts waiting tens of seconds", adaptive.P99)
		}
	})
	// A trigger on every put could make a task chase a steady stream (woken
	// by each put, one get for the message and one empty get after it);
	// the trigger floor keeps its gets batched.
	t.Run("triggered puts are fetched in batches, not one by one", func(t *testing.T) {
		// Packages trickle in over 15 minutes; with the 100 ms floor each get
		// takes what arrived in its window, several messages at a time.
		if adaptq.ByKind["get"]*3 > rep.Messages || adaptq.IdleCalls*3 > rep.Messages {
			t.Errorf("adaptq: %d idle calls and %d gets with messages for %d messages: the trigger chases puts",
				adaptq.IdleCalls, adaptq.ByKind["get"], rep.Messages)
		}
		t.Logf("idle calls a day: adaptq %d, seed-fixed %d, seed-adaptive %d, naive-1 %d",
			adaptq.IdleCalls, fixed.IdleCalls, adaptive.IdleCalls, naive.IdleCalls)
	})
	t.Run("far fewer calls than the naive loop and the article's listeners", func(t *testing.T) {
		for _, r := range []sim.Result{naive, fixed, adaptive} {
			if adaptq.IdleCalls*5/4 > r.IdleCalls {
				t.Errorf("adaptq: %d idle calls, not far below %s's %d", adaptq.IdleCalls, r.Policy, r.IdleCalls)
			}
			if adaptq.Calls >= r.Calls || adaptq.MonthlyCost >= r.MonthlyCost {
				t.Errorf("adaptq: %d calls ($%.2f), not below %s's %d ($%.2f)", adaptq.Calls, adaptq.MonthlyCost, r.Policy, r.Calls, r.MonthlyCost)
			}
		}
		if r, ok := rep.Result(sim.PolicyNaive200); ok && adaptq.IdleCalls*100 > r.IdleCalls {
			t.Errorf("adaptq: %d idle calls against naive-200's %d", adaptq.IdleCalls, r.IdleCalls)
		}
	})
}

// TestPackagesAtOnce is the article's scenario with each package put at once:
// one trigger per package, and a pool that must grow.
func TestPackagesAtOnce(t *testing.T) {
	t.Parallel()
	names := []string{sim.PolicySeedFixed, sim.PolicySeedAdaptive, sim.PolicyAdaptq}
	if !raceEnabled {
		// The naive loops handle one message per get: under the race
		// detector they cost more than the rest of the package's tests,
		// and TestSeedScenarioDay compares with naive-1 there.
		names = append(names, sim.PolicyNaive1, sim.PolicyNaive200)
	}
	w := sim.SeedScenarioWindow(sim.DefaultSeed, 1, 0)
	rep := run(t, w, lookup(t, names...), sim.Options{})
	adaptq := result(t, rep, sim.PolicyAdaptq)
	adaptive := result(t, rep, sim.PolicySeedAdaptive)
	for _, name := range names {
		r := result(t, rep, name)
		if name != sim.PolicyAdaptq && name != sim.PolicySeedAdaptive && adaptq.IdleCalls*2 > r.IdleCalls {
			t.Errorf("adaptq: %d idle calls, not far below %s's %d", adaptq.IdleCalls, name, r.IdleCalls)
		}
		if r.Processed != w.Messages() {
			t.Errorf("%s processed %d of %d", name, r.Processed, w.Messages())
		}
	}
	if adaptq.P99 >= adaptive.P99 {
		t.Errorf("adaptq p99 %s, seed-adaptive %s: want lower", adaptq.P99, adaptive.P99)
	}
	if adaptq.PeakTasks <= 1 || adaptive.PeakTasks != 100 || adaptive.EndTasks != 1 || adaptq.EndTasks != 1 {
		t.Errorf("pools: adaptq %d..%d, seed-adaptive %d..%d; want growth, and 1 at the end", adaptq.PeakTasks, adaptq.EndTasks, adaptive.PeakTasks, adaptive.EndTasks)
	}
	t.Logf("idle calls: adaptq %d, seed-adaptive %d; p99: adaptq %s, seed-adaptive %s", adaptq.IdleCalls, adaptive.IdleCalls, adaptq.P99, adaptive.P99)
}

// TestSLAPoolInTheSimulator drives the SLA policy through the real agent,
// driver and meter: a handler of 640 ms and batches of 32 drain 50
// messages a second per task. The first burst of 100,000 finds no rate
// known, so the fallback asks for the maximum and the agent learns; the
// second is sized by Little's law, ceil(100000 / (50 × 30)) = 67 tasks
// give or take the rate's estimate, and drains within the 30 s target.
func TestSLAPoolInTheSimulator(t *testing.T) {
	t.Parallel()
	w := sim.Workload{Name: "two bursts", Days: 1, Phases: []sim.Phase{
		{Duration: time.Hour, Burst: 100_000},
		{Duration: time.Hour, Burst: 100_000},
	}}
	type resize struct {
		at       time.Duration
		from, to int
	}
	var resizes []resize
	rep := run(t, w, lookup(t, sim.PolicyAdaptq), sim.Options{
		Service: 640 * time.Millisecond,
		OnResize: func(_ string, at time.Duration, from, to int) {
			resizes = append(resizes, resize{at, from, to})
		},
	})
	r := result(t, rep, sim.PolicyAdaptq)
	var second []resize
	for _, x := range resizes {
		if x.at >= time.Hour {
			second = append(second, x)
		}
	}
	if len(resizes) == 0 || resizes[0].at != 0 || resizes[0].to != 100 {
		t.Fatalf("first burst: resizes %v, want the fallback's 100 at once", resizes)
	}
	if len(second) == 0 || second[0].at != time.Hour || second[0].to < 67 || second[0].to > 75 {
		t.Fatalf("second burst: resizes %v, want about 67 tasks at once", second)
	}
	for _, x := range second {
		if x.to > second[0].to {
			t.Errorf("second burst: grew again to %d at %s", x.to, x.at)
		}
	}
	if r.MaxLatency > 30*time.Second+time.Second {
		t.Errorf("max pickup latency %s, want within the 30 s target", r.MaxLatency)
	}
	if r.Processed != 200_000 || r.EndTasks != 1 {
		t.Errorf("processed %d, %d tasks at the end", r.Processed, r.EndTasks)
	}
	t.Logf("second burst sized to %d tasks; max latency %s; p99 %s", second[0].to, r.MaxLatency, r.P99)
}

func TestDeterminism(t *testing.T) {
	t.Parallel()
	w, err := sim.ParseWorkload([]byte(`
phases:
  - {duration: 5m, rate: 10/s}
  - {duration: 10m}
  - {duration: 20m, burst: 5000}
  - {duration: 2m, rate: 1500/m}
  - {duration: 15m}
`))
	if err != nil {
		t.Fatal(err)
	}
	var all []sim.Policy
	for _, p := range sim.Builtin(0) {
		if p.Name != sim.PolicyNaive200 { // the same loop as naive-1, 200 times slower
			all = append(all, p)
		}
	}
	a := run(t, w, all, sim.Options{Seed: 7})
	b := run(t, w, all, sim.Options{Seed: 7})
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs with the same seed differ")
	}
	// The jitter follows the article, and a policy's jitter does not depend on
	// the policies beside it.
	c := run(t, w, all, sim.Options{Seed: 8})
	if reflect.DeepEqual(a.Results, c.Results) {
		t.Error("a different seed changed nothing")
	}
	alone := run(t, w, lookup(t, sim.PolicySeedFixed), sim.Options{Seed: 7})
	if !reflect.DeepEqual(alone.Results[0], result(t, a, sim.PolicySeedFixed)) {
		t.Error("seed-fixed alone differs from seed-fixed among others")
	}
	if a.Messages != 3_000+5_000+3_000 {
		t.Errorf("%d messages, want 11,000", a.Messages)
	}
}

func TestBatchDeletes(t *testing.T) {
	t.Parallel()
	w := sim.Workload{Days: 1, Phases: []sim.Phase{{Duration: 10 * time.Minute, Burst: 3200}}}
	ps := lookup(t, sim.PolicySeedAdaptive, sim.PolicyAdaptq)
	azure := run(t, w, ps, sim.Options{})
	batch := run(t, w, ps, sim.Options{BatchDelete: true})
	for _, rep := range []sim.Report{azure, batch} {
		if r := result(t, rep, sim.PolicySeedAdaptive); r.ByKind["delete"] != 3200 || r.ByKind["delete_batch"] != 0 {
			t.Errorf("seed-adaptive deletes one by one whatever the backend: %v", r.ByKind)
		}
	}
	if r := result(t, azure, sim.PolicyAdaptq); r.ByKind["delete"] != 3200 {
		t.Errorf("adaptq on Azure: %v, want 3200 deletes", r.ByKind)
	}
	r, a := result(t, batch, sim.PolicyAdaptq), result(t, azure, sim.PolicyAdaptq)
	if r.ByKind["delete"] != 0 || r.ByKind["delete_batch"] != r.ByKind["get"] {
		t.Errorf("adaptq on a batch-deleting backend: %v, want one delete_batch per get", r.ByKind)
	}
	// Nothing else changes: the 3,200 delete calls become 100.
	if r.Calls != a.Calls-3200+100 {
		t.Errorf("adaptq: %d calls with batch deletes, %d without; want 3,100 fewer", r.Calls, a.Calls)
	}
}

func TestConcurrencyBound(t *testing.T) {
	t.Parallel()
	// A quiet minute first: a task that has never been idle finds the
	// burst without a WorkDetected edge, and the pool would not grow.
	w := sim.Workload{Days: 1, Phases: []sim.Phase{{Duration: time.Minute}, {Duration: 10 * time.Minute, Burst: 50_000}}}
	ps := lookup(t, sim.PolicySeedAdaptive, sim.PolicyAdaptq, sim.PolicyNaive1)
	free := run(t, w, ps, sim.Options{})
	bound := run(t, w, ps, sim.Options{Concurrency: 64})
	for _, name := range []string{sim.PolicySeedAdaptive, sim.PolicyAdaptq} {
		f, b := result(t, free, name), result(t, bound, name)
		if f.MaxInFlight <= 64 {
			t.Errorf("%s without a bound ran at most %d handlers at once", name, f.MaxInFlight)
		}
		if b.MaxInFlight != 64 {
			t.Errorf("%s with 64 slots ran up to %d handlers at once", name, b.MaxInFlight)
		}
		if b.Processed != 50_000 || b.MaxLatency <= f.MaxLatency {
			t.Errorf("%s bounded: processed %d, max latency %s (unbounded %s)", name, b.Processed, b.MaxLatency, f.MaxLatency)
		}
	}
	if r := result(t, bound, sim.PolicyNaive1); r.MaxInFlight != 1 || r.Processed != 29_999 {
		// 10 minutes of one 20 ms handler at a time: 30,000 messages, the
		// last of which finishes at the workload's end, which is not
		// simulated (a run covers [0, end)).
		t.Errorf("naive-1: %d in flight, %d processed", r.MaxInFlight, r.Processed)
	}
}

func TestRunRejects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ok := sim.IdleDay()
	ps := lookup(t, sim.PolicyNaive1)
	for _, tc := range []struct {
		name string
		w    sim.Workload
		ps   []sim.Policy
		o    sim.Options
		want string
	}{
		{"no phases", sim.Workload{Days: 1}, ps, sim.Options{}, "sim: workload: phases: none given"},
		{"no policies", ok, nil, sim.Options{}, "sim: no policies to run"},
		{"service past visibility", ok, ps, sim.Options{Service: time.Minute}, "sim: service: 1m0s is not below the visibility timeout 30s (the model does not renew visibility)"},
		{"twice", ok, append(ps, ps...), sim.Options{}, `sim: policy "naive-1" is given twice`},
		{"bad policy", ok, []sim.Policy{{Name: "x", BatchSize: 40}}, sim.Options{}, `sim: policy "x": batch_size: 40 is outside 1..32`},
	} {
		_, err := sim.Run(ctx, tc.w, tc.ps, tc.o)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := sim.Run(cctx, ok, ps, sim.Options{}); err == nil {
		t.Error("a cancelled run returned no error")
	}
	if _, err := sim.Lookup([]string{"naive-2"}, 0); err == nil || err.Error() != `sim: policy "naive-2" is not one of adaptq, adaptq-auto, adaptq-poll, adaptq-rate, naive-1, naive-200, seed-adaptive, seed-fixed` {
		t.Errorf("Lookup: %v", err)
	}
}
