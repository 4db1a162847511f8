package adaptq

import (
	"context"
	"strings"
	"testing"

	"github.com/adaptq/adaptq/queue"
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
