package sim

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Against a downstream whose capacity halves and recovers (30 s each; a
// visibility timeout of 5 s, so that a refused message comes back often
// enough to be poisoned within them), the fixed concurrency poisons messages that only met a refusal,
// and the adaptive one poisons none, is refused far less often, and
// finishes messages sooner; both process what the downstream can serve.
func TestSlowdownFixedPoisonsAdaptiveDoesNot(t *testing.T) {
	sd, err := RunSlowdown(context.Background(), Options{Visibility: 5 * time.Second}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fixed, _ := sd.Report.Result("fixed")
	auto, _ := sd.Report.Result("auto")
	t.Logf("fixed: processed %d, refused %d, poisoned %d, p99 put→done %s; auto: processed %d, refused %d, poisoned %d, p99 put→done %s, mean limit %.1f",
		fixed.Processed, fixed.Refused, fixed.Poisoned, fixed.P99Done, auto.Processed, auto.Refused, auto.Poisoned, auto.P99Done, auto.MeanLimit)
	if fixed.Poisoned == 0 {
		t.Errorf("the fixed concurrency poisoned nothing: the scenario does not overload it")
	}
	if auto.Poisoned != 0 {
		t.Errorf("the adaptive concurrency poisoned %d messages for refusals alone", auto.Poisoned)
	}
	if auto.Refused*10 > fixed.Refused {
		t.Errorf("the adaptive concurrency was refused %d times, the fixed %d: want a tenth at most", auto.Refused, fixed.Refused)
	}
	if auto.P99Done > fixed.P99Done {
		t.Errorf("p99 put→done: adaptive %s, fixed %s", auto.P99Done, fixed.P99Done)
	}
	// The slow phase serves 200 a second at most: two healthy phases at
	// 300 (arrivals), one slow at 200.
	if served := int64(2*30*300 + 30*200); auto.Processed < served*9/10 {
		t.Errorf("the adaptive concurrency processed %d, want at least 90%% of the %d the downstream could serve", auto.Processed, served)
	}
}

// The rate-limited policy starts no more than its limit: at 200 arrivals
// a second for a minute, a limit of 100 processes 100 a second (and its
// first burst).
func TestRateLimitedPolicyKeepsItsRate(t *testing.T) {
	w := Workload{Name: "steady", Phases: []Phase{{Duration: time.Minute, Rate: 200}}}
	p := AdaptqRate("rate", 0, 100)
	rep, err := Run(context.Background(), w, []Policy{p}, Options{BatchDelete: true, Service: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Results[0]
	if lo, hi := int64(100*60-32), int64(100*60+32); r.Processed < lo || r.Processed > hi {
		t.Fatalf("processed %d in a minute at 100/s, want %d..%d", r.Processed, lo, hi)
	}
}

func TestScenarioFlagNamesItsValue(t *testing.T) {
	var out, errb strings.Builder
	if code := run(context.Background(), []string{"--scenario", "meltdown"}, &out, &errb); code != ExitUsage || !strings.Contains(errb.String(), `--scenario: "meltdown" is not slowdown`) {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}
