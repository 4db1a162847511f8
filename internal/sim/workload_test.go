package sim_test

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/sim"
)

func TestParseWorkload(t *testing.T) {
	t.Parallel()
	w, err := sim.ParseWorkload([]byte(`
name: month end
phases:
  - duration: 2h
    rate: 50/s
  - {duration: 1h, burst: 100000}
  - {duration: 30m, rate: 600/m, burst: 10}
  - {duration: 1h, rate: 3600/h}
  - {duration: 16h, rate: 0}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := sim.Workload{Name: "month end", Days: 1, Phases: []sim.Phase{
		{Duration: 2 * time.Hour, Rate: 50},
		{Duration: time.Hour, Burst: 100_000},
		{Duration: 30 * time.Minute, Rate: 10, Burst: 10},
		{Duration: time.Hour, Rate: 1},
		{Duration: 16 * time.Hour},
	}}
	if !reflect.DeepEqual(w, want) {
		t.Fatalf("parsed %+v\nwant   %+v", w, want)
	}
	if got := w.Messages(); got != 360_000+100_000+18_000+10+3_600 {
		t.Errorf("Messages() = %d", got)
	}
	if got := w.Length(); got != 20*time.Hour+30*time.Minute {
		t.Errorf("Length() = %s", got)
	}
}

func TestParseWorkloadErrorsNameTheFieldAndValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		yaml, want string
	}{
		{``, "sim: workload: the file is empty"},
		{`phases: []`, "sim: workload: phases: none given"},
		{`phases: [{rate: 5/s}]`, "sim: workload: phases[0].duration: missing"},
		{`phases: [{duration: 3600}]`, "sim: workload: phases[0].duration: 3600 is not a Go duration string (e.g. 90s, 2h)"},
		{`phases: [{duration: 1h}, {duration: 2 days}]`, `sim: workload: phases[1].duration: "2 days" is not a Go duration (e.g. 90s, 2h)`},
		{`phases: [{duration: -1h}]`, "sim: workload: phases[0].duration: -1h0m0s is not positive"},
		{`phases: [{duration: 1h, rate: 50}]`, `sim: workload: phases[0].rate: "50" has no unit: write N/s, N/m or N/h (e.g. 50/s)`},
		{`phases: [{duration: 1h, rate: 50/d}]`, `sim: workload: phases[0].rate: "50/d": unit "d" is not s, m or h`},
		{`phases: [{duration: 1h, rate: lots/s}]`, `sim: workload: phases[0].rate: "lots/s": "lots" is not a number of messages`},
		{`phases: [{duration: 1h, rate: -5/s}]`, `sim: workload: phases[0].rate: "-5/s": "-5" is not a number of messages`},
		{`phases: [{duration: 1h, burst: -3}]`, "sim: workload: phases[0].burst: -3 is negative"},
		{`phases: [{duration: 1h, rate: 2000000/s}]`, "sim: workload: phases[0].rate: 2e+06/s is above the most the simulator takes, 1000000/s"},
		{`phases: [{duration: 1h, burst: 1.5}]`, `sim: workload: phases[0].burst: 1.5 is not a whole number of messages`},
		{`phases: [{duration: [1h]}]`, "sim: workload: phases[0].duration: a list is not a Go duration string (e.g. 90s, 2h)"},
		{`phases: [{duration: 1h, rate: {n: 5}}]`, "sim: workload: phases[0].rate: a map is not a rate (e.g. 50/s)"},
		{"phases:\n  - {duration: 1h, burts: 5}", `sim: workload: line 2: unknown key "burts"`},
		{"phase: []", `sim: workload: line 1: unknown key "phase"`},
		{"phases: {duration: 1h}", "sim: workload: line 1: cannot unmarshal !!map into []sim.yamlPhase"},
	} {
		_, err := sim.ParseWorkload([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

func TestLoadWorkloadAndFormatRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	seed := sim.SeedScenario(42, 1)
	var b strings.Builder
	if err := seed.Format(&b); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "seed.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	back, err := sim.LoadWorkload(path)
	if err != nil {
		t.Fatal(err)
	}
	if back.Length() != seed.Length() || back.Messages() != seed.Messages() || len(back.Phases) != len(seed.Phases) {
		t.Fatalf("round trip: %s, %d messages, %d phases; want %s, %d, %d",
			back.Length(), back.Messages(), len(back.Phases), seed.Length(), seed.Messages(), len(seed.Phases))
	}
	if back.Name != seed.Name {
		t.Errorf("name %q, want %q", back.Name, seed.Name)
	}
	if _, err := sim.LoadWorkload(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("a missing file loaded")
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("phases: [{duration: 10}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.LoadWorkload(bad); err == nil || !strings.Contains(err.Error(), "phases[0].duration: 10") || !strings.Contains(err.Error(), bad) {
		t.Errorf("bad file: %v", err)
	}
}

func TestSeedScenarioShape(t *testing.T) {
	t.Parallel()
	for _, seed := range []int64{sim.DefaultSeed, 1, 2, 3} {
		w := sim.SeedScenario(seed, 2)
		if w.Days != 2 || w.Length() != 48*time.Hour {
			t.Fatalf("seed %d: %d days, %s", seed, w.Days, w.Length())
		}
		var busy time.Duration
		var packages int
		var at time.Duration
		for _, p := range w.Phases {
			if p.Rate > 0 {
				packages++
				busy += p.Duration
				size := p.Messages()
				if size < sim.SeedBurstMin || size > sim.SeedBurstMax {
					t.Errorf("seed %d: a package of %d", seed, size)
				}
				if p.Duration != 15*time.Minute {
					t.Errorf("seed %d: a package over %s", seed, p.Duration)
				}
				if day := at % (24 * time.Hour); day >= 8*time.Hour {
					t.Errorf("seed %d: a package at %s of its day, after the workday", seed, day)
				}
			}
			at += p.Duration
		}
		// 8 packages a day, busy 25% of the 8-hour workday.
		if packages != 16 || busy != 4*time.Hour {
			t.Errorf("seed %d: %d packages over %s in 2 days, want 16 over 4h", seed, packages, busy)
		}
	}
	if a, b := sim.SeedScenario(5, 1), sim.SeedScenario(5, 1); !reflect.DeepEqual(a, b) {
		t.Error("the same seed drew two scenarios")
	}
	if a, b := sim.SeedScenario(5, 1), sim.SeedScenario(6, 1); reflect.DeepEqual(a.Phases, b.Phases) {
		t.Error("two seeds drew one scenario")
	}
	// Sizes are log-uniform: over many days the median is near the
	// geometric mean of the bounds, 20,000, far below the arithmetic one.
	w := sim.SeedScenario(9, 200)
	var logs []float64
	for _, p := range w.Phases {
		if p.Rate > 0 {
			logs = append(logs, math.Log(float64(p.Messages())))
		}
	}
	var mean float64
	for _, l := range logs {
		mean += l
	}
	mean /= float64(len(logs))
	if g := math.Exp(mean); g < 15_000 || g > 27_000 {
		t.Errorf("geometric mean package %.0f, want about 20,000", g)
	}
	// At once: each package is a burst at a whole minute of its hour.
	at := sim.SeedScenarioWindow(sim.DefaultSeed, 1, 0)
	bursts := 0
	for _, p := range at.Phases {
		if p.Burst > 0 {
			bursts++
		}
		if p.Rate > 0 {
			t.Errorf("packages at once, but a phase has rate %v", p.Rate)
		}
	}
	if bursts != 8 || at.Messages() != sim.SeedScenario(sim.DefaultSeed, 1).Messages() {
		t.Errorf("%d bursts, %d messages", bursts, at.Messages())
	}
}

func TestRepeat(t *testing.T) {
	t.Parallel()
	w := sim.Workload{Name: "x", Days: 1, Phases: []sim.Phase{{Duration: time.Hour, Burst: 3}}}
	r := w.Repeat(3)
	if r.Days != 3 || len(r.Phases) != 3 || r.Messages() != 9 || r.Length() != 3*time.Hour {
		t.Fatalf("Repeat(3) = %+v", r)
	}
	if !reflect.DeepEqual(w.Repeat(1), w) {
		t.Error("Repeat(1) changed the workload")
	}
}
