package adaptq

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/scaling"
)

func TestFlowConfigNamesTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		yaml string
		env  []string
		want string
	}{
		{"queues: [{url: 'memory://a1b', concurrency: many}]", nil, `queues[0].concurrency: "many" is not a whole number or auto`},
		{"queues: [{url: 'memory://a1b', concurrency: 0}]", nil, "queues[0].concurrency: 0 is below 1 (or auto, to adapt it)"},
		{"queues: [{url: 'memory://a1b', concurrency: -1}]", nil, "queues[0].concurrency: -1 is below 1 (or auto, to adapt it)"},
		{goodQueue, []string{"ADAPTQ_QUEUES_0_CONCURRENCY=-1"}, "ADAPTQ_QUEUES_0_CONCURRENCY (queues[0].concurrency): -1 is below 1"},
		{"queues: [{url: 'memory://a1b', concurrency: 8, adaptive_concurrency: {max: 20}}]", nil, "queues[0].adaptive_concurrency: is set, but concurrency is 8, not auto"},
		{"queues: [{url: 'memory://a1b', concurrency: auto, adaptive_concurrency: {min: 10, max: 4}}]", nil, "queues[0].adaptive_concurrency.max: 4 is below adaptive_concurrency.min 10"},
		{"queues: [{url: 'memory://a1b', concurrency: auto, adaptive_concurrency: {min: -1}}]", nil, "queues[0].adaptive_concurrency.min: -1 is negative"},
		{"queues: [{url: 'memory://a1b', rate_limit: {per_second: -5}}]", nil, "queues[0].rate_limit.per_second: -5 is not a number ≥ 0"},
		{"queues: [{url: 'memory://a1b', rate_limit: {burst: 10}}]", nil, "queues[0].rate_limit.burst: 10 is set without rate_limit.per_second"},
		{"queues: [{url: 'memory://a1b', rate_limit: {per_second: 10, burst: -1}}]", nil, "queues[0].rate_limit.burst: -1 is negative"},
		{"queues: [{url: 'memory://a1b', rate_limit: {per_second: fast}}]", nil, `queues[0].rate_limit.per_second: "fast" is not a number`},
		{"queues: [{url: 'memory://a1b', rate_limit: {perSecond: 3}}]", nil, `queues[0].rate_limit.persecond: unknown key (did you mean "per_second"?)`},
		{goodQueue, []string{"ADAPTQ_QUEUES_0_CONCURRENCY=lots"}, `ADAPTQ_QUEUES_0_CONCURRENCY (queues[0].concurrency): "lots" is not a whole number or auto`},
		{goodQueue, []string{"ADAPTQ_QUEUES_0_RATE_LIMIT_PER_SECOND=-1"}, "ADAPTQ_QUEUES_0_RATE_LIMIT_PER_SECOND (queues[0].rate_limit.per_second): -1 is not a number"},
	} {
		_, err := parseConfig("test.yaml", []byte(tc.yaml), tc.env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %v: error %v, want one containing %q", tc.yaml, tc.env, err, tc.want)
		}
	}
}

func TestFlowConfigReachesTheListener(t *testing.T) {
	cfg, err := parseConfig("test.yaml", []byte(`
admin: {address: ""}
queues:
  - url: memory://flowauto
    concurrency: auto
    adaptive_concurrency: {min: 2, max: 40}
    rate_limit: {per_second: 50}
  - url: memory://flowfixed
    concurrency: 12
    rate_limit: {per_second: 2.5, burst: 1}
`), []string{"ADAPTQ_QUEUES_1_CONCURRENCY=auto"})
	if err != nil || cfg.Queues[1].Concurrency != ConcurrencyAuto || cfg.Queues[1].concurrency() != 64 {
		t.Fatalf("ADAPTQ_QUEUES_1_CONCURRENCY=auto: %v, concurrency %s; want auto, bounded by 64", err, cfg.Queues[1].Concurrency)
	}
	cfg, err = parseConfig("test.yaml", []byte(`
admin: {address: ""}
queues:
  - url: memory://flowauto
    concurrency: auto
    adaptive_concurrency: {min: 2, max: 40}
    rate_limit: {per_second: 50}
  - url: memory://flowfixed
    concurrency: 12
    rate_limit: {per_second: 2.5, burst: 1}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nop := func(context.Context, *queue.Message) error { return nil }
	w.MustHandle("flowauto", nop)
	w.MustHandle("flowfixed", nop)
	runWorker(t, w)
	la, _ := w.Listener("flowauto")
	lf, _ := w.Listener("flowfixed")
	fa, ff := la.Flow(), lf.Flow()
	if !fa.Adaptive || fa.Limit != 2 || fa.Min != 2 || fa.Max != 40 || fa.RatePerSecond != 50 || fa.RateBurst != 32 {
		t.Errorf("auto queue: %+v, want adaptive 2..40 starting at 2, 50/s with a burst of 32", fa)
	}
	if ff.Adaptive || ff.Limit != 12 || ff.RatePerSecond != 2.5 || ff.RateBurst != 1 {
		t.Errorf("fixed queue: %+v, want 12 fixed, 2.5/s with a burst of 1", ff)
	}
}

// /metrics shows the adaptive limit, its bound, its cuts and the overload
// signals, and the rate limit.
func TestFlowMetrics(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("flowmetrics")
	w := metricsWorker(t, `
admin: {address: "127.0.0.1:0"}
queues:
  - url: 'memory://`+name+`'
    handler: work
    concurrency: auto
    adaptive_concurrency: {min: 4, max: 30}
    rate_limit: {per_second: 1000}
    idle: {max: 200ms}
`)
	var refused atomic.Int32
	w.MustHandle("work", func(context.Context, *queue.Message) error {
		if refused.Add(1) <= 3 {
			return handler.Overloaded(errors.New("busy"))
		}
		return nil
	})
	runWorker(t, w)
	if _, err := w.Put(context.Background(), name, []byte("m"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	l, _ := w.Listener(name)
	testutil.Eventually(t, testutil.HangGuard, "the overloads", func() bool { return l.Flow().Overloads >= 1 })
	fams := scrape(t, w.AdminAddress(), "")
	for _, c := range []struct {
		metric string
		ok     func(float64) bool
	}{
		{"adaptq_concurrency_limit", func(v float64) bool { return v >= 4 && v <= 30 }},
		{"adaptq_concurrency_limit_max", func(v float64) bool { return v == 30 }},
		{"adaptq_overload_signals_total", func(v float64) bool { return v >= 1 }},
		{"adaptq_concurrency_cuts_total", func(v float64) bool { return v >= 0 }},
		{"adaptq_rate_limit_per_second", func(v float64) bool { return v == 1000 }},
		{"adaptq_rate_limit_waits_total", func(v float64) bool { return v >= 0 }},
	} {
		if v := value(fams, c.metric, "queue", name); !c.ok(v) {
			t.Errorf("%s = %v", c.metric, v)
		}
	}
	// The status page shows the limit and the rate limit; /v1/stats too.
	resp, page := adminSend(t, w.AdminAddress(), http.MethodGet, "/", nil)
	if resp.StatusCode != http.StatusOK || !regexp.MustCompile(`class="n concurrency">\d+ of auto 4–30<br><span class="dim ratelimit">1000/s, burst 32</span>`).Match(page) {
		t.Errorf("GET /: %s; the row shows no adaptive concurrency and rate limit:\n%s", resp.Status, page)
	}
	resp, stats := adminSend(t, w.AdminAddress(), http.MethodGet, "/v1/stats", nil)
	if resp.StatusCode != http.StatusOK || !regexp.MustCompile(`"adaptive":\s*true`).Match(stats) || !regexp.MustCompile(`"rate_limit_per_second":\s*1000`).Match(stats) {
		t.Errorf("GET /v1/stats: %s; no flow figures:\n%s", resp.Status, stats)
	}
}

// A slow rate limit makes gets rare: readiness waits for three of its
// token intervals, not three idle polls.
func TestReadyWindowCoversASlowRateLimit(t *testing.T) {
	o := listener.Options{Idle: scaling.IdleBackoff{Max: time.Minute}, RateLimit: listener.RateLimit{PerSecond: 1.0 / 600, Burst: 1}}
	if w := readyWindow(o); w != ReadyCadences*10*time.Minute {
		t.Fatalf("window %s at one message every 10 minutes, want %s", w, ReadyCadences*10*time.Minute)
	}
	// A tiny rate's interval does not fit a Duration: capped, not
	// overflowed into a window shorter than the idle polls'.
	o.RateLimit = listener.RateLimit{PerSecond: 1e-12, Burst: 1}
	if w := readyWindow(o); w < ReadyCadences*24*time.Hour {
		t.Fatalf("window %s at 1e-12 a second, want at least %s", w, ReadyCadences*24*time.Hour)
	}
	o.RateLimit = listener.RateLimit{PerSecond: 100, Burst: 32}
	if w := readyWindow(o); w != ReadyCadences*time.Minute {
		t.Fatalf("window %s at 100/s, want the idle polls' %s", w, ReadyCadences*time.Minute)
	}
}
