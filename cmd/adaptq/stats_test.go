package main

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/admin"
)

// startWorker runs a worker in-process on workerYAML, with $DIR replaced by
// dir and its admin endpoint on a free port, until the test ends. It
// returns the worker and the path of its config as the CLI reads it, with
// the admin address the worker got.
func startWorker(t *testing.T, dir, workerYAML string) (*adaptq.Worker, string) {
	t.Helper()
	wcfg, err := adaptq.ParseConfig("worker.yaml", []byte(strings.NewReplacer("$DIR", dir, "$ADDR", "127.0.0.1:0").Replace(workerYAML)))
	if err != nil {
		t.Fatal(err)
	}
	w, err := adaptq.New(wcfg, adaptq.WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-w.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	return w, writeConfig(t, dir, strings.ReplaceAll(workerYAML, "$ADDR", w.AdminAddress()))
}

// depthTable reads the QUEUE DEPTH table that starts stats' output.
func depthTable(out string) map[string]string {
	rows := map[string]string{}
	for i, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) != 2 {
			if i > 0 {
				break
			}
			continue
		}
		rows[f[0]] = f[1]
	}
	return rows
}

func TestStatsWithoutAWorkerShowsDepths(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	addr := freeAddress(t)
	cfg := writeConfig(t, dir, `
log: {level: error}
admin: {address: "`+addr+`"}
queues:
  - url: sqlite://$DIR/q.db?queue=orders
    handler: "exec: cat"
  - name: invoices
    url: sqlite://$DIR/q.db?queue=invoices
    handler: "exec: cat"
`)
	mustCLI(t, "", "enqueue", "-c", cfg, "-q", "orders", "--count", "3", "x")
	mustCLI(t, "", "enqueue", "-c", cfg, "-q", "invoices", "y")

	r := mustCLI(t, "", "stats", "-c", cfg)
	if got, want := depthTable(r.stdout), map[string]string{"orders": "3", "orders-poison": "0", "invoices": "1", "invoices-poison": "0"}; !maps.Equal(got, want) {
		t.Errorf("depths %v, want %v:\n%s", got, want, r.stdout)
	}
	if want := "worker not running at " + addr + " (only depth shown)"; !strings.Contains(r.stdout, want) {
		t.Errorf("stats lacks %q:\n%s", want, r.stdout)
	}

	r = mustCLI(t, "", "stats", "-c", cfg, "--json")
	var rep statsReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if len(rep.Queues) != 2 || rep.Queues[0].Name != "orders" || rep.Queues[0].Depth != 3 || rep.Queues[1].Depth != 1 ||
		rep.Queues[1].Poison == nil || rep.Queues[1].Poison.Name != "invoices-poison" {
		t.Errorf("queues %+v", rep.Queues)
	}
	if rep.Worker == nil || rep.Worker.Running || rep.Worker.Stats != nil || !strings.Contains(rep.Worker.Note, "not running") {
		t.Errorf("worker %+v", rep.Worker)
	}

	r = mustCLI(t, "", "stats", "-c", cfg, "-q", "invoices")
	if got, want := depthTable(r.stdout), map[string]string{"invoices": "1", "invoices-poison": "0"}; !maps.Equal(got, want) {
		t.Errorf("stats --queue invoices: %v, want %v:\n%s", got, want, r.stdout)
	}
	r = mustCLI(t, "", "stats", "--url", "sqlite://"+dir+"/q.db?queue=orders")
	if got, want := depthTable(r.stdout), map[string]string{"orders": "3", "orders-poison": "0"}; !maps.Equal(got, want) || strings.Contains(r.stdout, "worker") {
		t.Errorf("stats --url: %v, want %v:\n%s", got, want, r.stdout)
	}
}

func TestStatsReadsTheRunningWorker(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const token = "stats-Ub4nZk7pEy2q"
	workerYAML := `
log: {level: error}
admin: {address: "$ADDR", token: "` + token + `"}
queues:
  - url: sqlite://$DIR/q.db?queue=orders
    handler: "exec: cat"
    idle: {max: 200ms}
`
	w, cfg := startWorker(t, dir, workerYAML)

	mustCLI(t, "", "enqueue", "-c", cfg, "--count", "5", "work")
	var rep statsReport
	waitUntil(t, "the worker deleted the 5 messages", func() bool {
		r := mustCLI(t, "", "stats", "-c", cfg, "--json")
		rep = statsReport{}
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("%v\n%s", err, r.stdout)
		}
		return rep.Worker != nil && rep.Worker.Stats != nil && len(rep.Worker.Stats.Queues) == 1 && rep.Worker.Stats.Queues[0].Deleted == 5
	})
	q := rep.Worker.Stats.Queues[0]
	if !rep.Worker.Running || q.Name != "orders" || q.Processed != 5 || q.TotalCalls == 0 || q.Calls["get"] == 0 || q.ActiveTasks < 1 {
		t.Errorf("worker stats %+v", q)
	}
	// The worker has run for seconds: its windows cover the whole run, and
	// nothing is extrapolated from it.
	if m := q.LastMinute; m.Full || m.Deleted != 5 || m.PickedUp != 5 || m.MonthlyCost != nil || q.MonthlyCost != nil || q.IdleCallsPerHour != nil {
		t.Errorf("last minute %+v, monthly %v, idle %v", m, q.MonthlyCost, q.IdleCallsPerHour)
	}

	r := mustCLI(t, "", "stats", "-c", cfg)
	if d := depthTable(r.stdout)["orders"]; d != "0" {
		t.Errorf("depth of orders %q, want 0:\n%s", d, r.stdout)
	}
	for _, want := range []string{"worker at " + w.AdminAddress(), "5 processed, 0 failed, 5 deleted", "calls      get ", "in all", "per message",
		"last min   over the ", "run so far (less than 1m0s): 5 processed (", "last hour  over the ",
		"a month at the current rate: not known before the worker has run 1m0s"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stats lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout+r.stderr, token) {
		t.Errorf("stats shows the admin token:\n%s", r.stdout)
	}

	// A wrong token is refused, and said so.
	bad := writeConfig(t, t.TempDir(), strings.NewReplacer("$DIR", dir, "$ADDR", w.AdminAddress(), token, "wrong-Zx9vBn3mKq7p").Replace(workerYAML))
	r = mustCLI(t, "", "stats", "-c", bad)
	if !strings.Contains(r.stdout, "HTTP 401") || !strings.Contains(r.stdout, "admin.token") {
		t.Errorf("stats with a wrong token:\n%s", r.stdout)
	}
}

// enqueue pulls the push trigger of a queue that has one: a worker whose
// idle tasks sleep for an hour handles the message at once.
func TestEnqueueTriggersTheWorker(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	workerYAML := `
log: {level: error}
admin: {address: "$ADDR"}
queues:
  - url: sqlite://$DIR/q.db?queue=orders
    handler: "exec: cat"
    idle: {min: 1h, max: 1h}
    trigger: {enabled: true, safety_interval: 1h}
`
	w, cfg := startWorker(t, dir, workerYAML)
	// The only task's first get found nothing: it now sleeps for an hour.
	waitUntil(t, "the worker is idle", func() bool {
		l, ok := w.Listener("orders")
		if !ok {
			return false
		}
		st, err := l.State(context.Background())
		return err == nil && st.IdleTasks == 1
	})

	r := mustCLI(t, "", "enqueue", "-c", cfg, "wake up")
	if !strings.HasSuffix(r.stdout, "; worker triggered\n") {
		t.Errorf("summary %q does not say the worker was triggered", r.stdout)
	}
	waitUntil(t, "the worker handled the message", func() bool {
		return queueDepthOf(t, "sqlite://"+dir+"/q.db?queue=orders") == 0
	})

	// A delayed message is not visible yet: no trigger.
	r = mustCLI(t, "", "enqueue", "-c", cfg, "--delay", "1m", "later")
	if strings.Contains(r.stdout, "trigger") {
		t.Errorf("a delayed put pulled the trigger: %q", r.stdout)
	}
}

// Once a window covers a minute, stats gives the month's cost at its rate
// and names the window: the last hour once the worker has run an hour.
func TestStatsNamesTheWindowOfTheMonthlyCost(t *testing.T) {
	t.Parallel()
	monthly, idle := 0.0086, 12.0
	for _, tc := range []struct {
		hourFull bool
		want     string
	}{
		{false, "$0.0086 a month at the rate of the last minute, 12 empty gets an hour"},
		{true, "$0.0086 a month at the rate of the last hour, 12 empty gets an hour"},
	} {
		q := admin.QueueStats{Name: "orders", MonthlyCost: &monthly, IdleCallsPerHour: &idle}
		q.LastMinute = admin.Window{Span: admin.Duration(time.Minute), Elapsed: admin.Duration(time.Minute), Full: true, EmptyGets: 1}
		q.LastHour = admin.Window{Span: admin.Duration(time.Hour), Elapsed: admin.Duration(20 * time.Minute), Full: tc.hourFull}
		var b strings.Builder
		printStats(&b, statsReport{Worker: &workerReport{Address: "x", Running: true, Stats: &admin.Stats{Queues: []admin.QueueStats{q}}}})
		if !strings.Contains(b.String(), tc.want) || !strings.Contains(b.String(), "last min   over 1m0s: ") {
			t.Errorf("hour full %v: stats lacks %q:\n%s", tc.hourFull, tc.want, b.String())
		}
	}
}
