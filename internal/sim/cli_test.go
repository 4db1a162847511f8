package sim_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/adaptq/adaptq/internal/sim"
)

func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = sim.Main(args, &out, &errb)
	return code, out.String(), errb.String()
}

func workloadFile(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "day.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCLITable(t *testing.T) {
	t.Parallel()
	path := workloadFile(t, "phases:\n  - {duration: 1h, burst: 5000}\n  - {duration: 21h}\n")
	code, out, errs := cli(t, "--workload", path, "--policy", "naive-1,adaptq", "--policy", "seed-adaptive", "--service", "10ms", "--price", "0.01")
	if code != sim.ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(out, "\n")
	var header, rows []string
	for _, l := range lines {
		switch f := strings.Fields(l); {
		case len(f) > 0 && f[0] == "policy":
			header = append(header, l)
		case len(f) == 13:
			rows = append(rows, l)
		}
	}
	if len(header) != 1 || len(rows) != 3 {
		t.Fatalf("want a header and 3 rows:\n%s", out)
	}
	// Aligned: every row is as wide as the header, and the columns end in
	// the same places.
	for _, r := range rows {
		if len(r) != len(header[0]) {
			t.Errorf("row %q is not as wide as the header %q", r, header[0])
		}
	}
	for i, name := range []string{"naive-1", "adaptq", "seed-adaptive"} {
		if strings.Fields(rows[i])[0] != name {
			t.Errorf("row %d is %q, want %s", i, rows[i], name)
		}
	}
	for _, want := range []string{path, "5,000 messages", "service 10ms", "one call per message deleted (Azure)", "the Best Practices article: idle tasks stop down to 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report does not mention %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errs, "simulated 22h of 3 policies in") {
		t.Errorf("stderr: %q", errs)
	}
}

func TestCLIJSON(t *testing.T) {
	t.Parallel()
	path := workloadFile(t, "phases:\n  - {duration: 22h}\n")
	code, out, errs := cli(t, "--workload", path, "--policy", "naive-1", "--json")
	if code != sim.ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep struct {
		Days    int `json:"days"`
		Results []struct {
			Policy      string           `json:"policy"`
			Calls       int64            `json:"calls"`
			IdleCalls   int64            `json:"idle_calls"`
			ByKind      map[string]int64 `json:"calls_by_kind"`
			MonthlyCost float64          `json:"monthly_cost_usd"`
			P99         float64          `json:"p99_latency_s"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	r := rep.Results[0]
	if rep.Days != 1 || r.Policy != "naive-1" || r.Calls != 79_200 || r.IdleCalls != 79_200 || r.ByKind["get_empty"] != 79_200 || r.MonthlyCost != 2.38 {
		t.Errorf("JSON report %+v", rep)
	}
}

func TestCLIDaysRepeatAWorkloadFile(t *testing.T) {
	t.Parallel()
	path := workloadFile(t, "phases:\n  - {duration: 1h}\n")
	code, out, errs := cli(t, "--workload", path, "--policy", "naive-1", "--days", "3", "--json")
	if code != sim.ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rep struct {
		Days    int    `json:"days"`
		Length  string `json:"length"`
		Results []struct {
			Calls int64 `json:"calls"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Days != 3 || rep.Length != "3h" || rep.Results[0].Calls != 3*3600 {
		t.Errorf("3 days of an hour: %+v", rep)
	}
}

func TestCLIPrintWorkload(t *testing.T) {
	t.Parallel()
	code, out, errs := cli(t, "--print-workload", "--seed", "3", "--burst-window", "0")
	if code != sim.ExitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	w, err := sim.ParseWorkload([]byte(out))
	if err != nil {
		t.Fatalf("the printed workload does not parse: %v\n%s", err, out)
	}
	if want := sim.SeedScenarioWindow(3, 1, 0); w.Messages() != want.Messages() || w.Length() != want.Length() || w.Name != want.Name {
		t.Errorf("printed %q: %d messages over %s; want %q: %d over %s", w.Name, w.Messages(), w.Length(), want.Name, want.Messages(), want.Length())
	}
}

func TestCLIUsage(t *testing.T) {
	t.Parallel()
	code, out, errs := cli(t, "--help")
	if code != sim.ExitOK || strings.Count(out, "usage: adaptq simulate") != 1 || !strings.Contains(out, "adaptq-poll") || errs != "" {
		t.Errorf("--help: exit %d, stderr %q, want the usage once on stdout:\n%s", code, errs, out)
	}
	if !strings.Contains(out, "      --days int") {
		t.Errorf("--help does not show --flags as every other command does:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--days", "0"}, sim.ExitUsage, "--days: 0 is below 1"},
		{[]string{"--service", "soon"}, sim.ExitUsage, `invalid argument "soon" for "--service" flag`},
		{[]string{"--bogus"}, sim.ExitUsage, "unknown flag: --bogus\nRun 'adaptq simulate --help' for usage."},
		{[]string{"--price", "0"}, sim.ExitUsage, "--price: 0 is not positive"},
		{[]string{"--policy", "naive-3"}, sim.ExitUsage, `--policy: policy "naive-3" is not one of adaptq, adaptq-auto, adaptq-poll, adaptq-rate`},
		{[]string{"extra"}, sim.ExitUsage, `unexpected argument "extra"`},
		{[]string{"--burst-window", "-1s"}, sim.ExitUsage, "--burst-window: -1s is negative"},
		{[]string{"--workload", "/nonexistent/day.yaml"}, sim.ExitError, "no such file"},
		{[]string{"--service", "1m", "--policy", "naive-1"}, sim.ExitError, "is not below the visibility timeout"},
	} {
		code, _, errs := cli(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errs, tc.code, tc.want)
		}
	}
}
