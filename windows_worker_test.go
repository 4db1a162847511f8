package adaptq

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/queue"
)

// getJSON GETs path from the admin endpoint at addr and decodes the answer.
func getJSON(t *testing.T, addr, token, path string, v any) {
	t.Helper()
	resp, b := adminSend(t, addr, http.MethodGet, path, nil, bearer(token)...)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// putN puts n messages on the queue at url, from outside the worker.
func putN(t *testing.T, url string, n int) {
	t.Helper()
	ctx := context.Background()
	q, err := queue.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for range n {
		if _, err := q.Put(ctx, []byte("m"), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// The repro, in virtual time: 2 s after draining 3,000 messages,
// stats reported 280,299 empty gets an hour ($410 a month), extrapolated
// from the calls since start; a triggered idle worker showed 508 an hour,
// not 12. The windows report the drain over the 2 s it took, extrapolate
// nothing from them, and after an hour idle show the idle hour's 12 empty
// gets (one per 5-minute safety interval).
func TestStatsWindowsReplayTheDrainThenIdleRepro(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("windows-repro")
	url := "memory://" + name
	const messages = 3000
	cfg := testConfig(t, `
admin: {address: "127.0.0.1:0"}
queues:
  - url: `+url+`
    handler: work
    idle: {max: 1m}
    trigger: {enabled: true, safety_interval: 5m}
    pool: {initial: 94}
`)
	putN(t, url, messages)
	// The memory queue stamps messages with the wall clock: the fake one
	// starts there so that pickup latencies are what they seem.
	fake := clock.NewFake(time.Now())
	w, err := New(cfg, WithLogger(zap.NewNop()), withClock(fake))
	if err != nil {
		t.Fatal(err)
	}
	w.MustHandle("work", func(context.Context, *queue.Message) error { return nil })
	runWorker(t, w)
	l, _ := w.Listener(name)
	addr := w.AdminAddress()
	stats := func() admin.QueueStats {
		var s admin.Stats
		getJSON(t, addr, "", admin.StatsPath, &s)
		if len(s.Queues) != 1 {
			t.Fatalf("stats of %d queues", len(s.Queues))
		}
		return s.Queues[0]
	}

	// The drain, by the 94 tasks a proportional pool asks for 3,000
	// messages: the clock moves on in small steps while tasks pace and
	// sleep.
	waitUntil(t, "the worker drains the queue", func() bool {
		if l.Stats().Deleted == messages {
			return true
		}
		fake.Advance(10 * time.Millisecond)
		return false
	})
	for range 20 {
		fake.Advance(100 * time.Millisecond)
	}
	up := fake.Now().Sub(w.started)
	q := stats()
	m := q.LastMinute
	if m.Full || time.Duration(m.Elapsed) != up || m.Deleted != messages || m.Processed != messages {
		t.Errorf("last minute, %s after start: %+v", up, m)
	}
	if m.MonthlyCost != nil || m.EmptyGetsPerHour != nil || q.MonthlyCost != nil || q.IdleCallsPerHour != nil {
		t.Errorf("%s after start, extrapolated: monthly %v / %v, empty gets an hour %v / %v", up, m.MonthlyCost, q.MonthlyCost, m.EmptyGetsPerHour, q.IdleCallsPerHour)
	}
	if m.Rate <= 0 || m.CallsPerMessage <= 0 || m.PickedUp != messages {
		t.Errorf("last minute: rate %v, calls per message %v, %d picked up", m.Rate, m.CallsPerMessage, m.PickedUp)
	}
	// What the since-start extrapolation said at this point.
	oldPerHour := float64(q.Calls["get_empty"]) / up.Hours()
	t.Logf("%s after start: %d empty gets so far, %.0f an hour extrapolated", up.Round(time.Millisecond), q.Calls["get_empty"], oldPerHour)

	// Idle with the trigger on: the tasks back off and stop but one, which
	// backs off to the safety interval; the scaling agent stops sampling.
	// Then two timers are left, the windows' tick and the task's sleep.
	// Move the clock a second at a time, each step once both are set again.
	const pending = 2
	waitUntil(t, "one task is left, idle, and the agent rests", func() bool {
		s, _ := l.State(context.Background())
		if s.ActiveTasks == 1 && s.IdleTasks == 1 && fake.Pending() == pending {
			return true
		}
		fake.Advance(time.Second)
		return false
	})
	emptyAt := map[time.Time]int64{}
	step := func() {
		fake.Advance(time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), testutil.HangGuard)
		defer cancel()
		if !fake.WaitPending(ctx, pending) {
			t.Fatalf("the worker's %d timers were not all set again", pending)
		}
		emptyAt[fake.Now()] = l.Stats().EmptyGets
	}
	for range 75 * 60 {
		step()
	}
	up = fake.Now().Sub(w.started)
	q = stats()
	h := q.LastHour
	base, ok := emptyAt[fake.Now().Add(-time.Duration(h.Elapsed))]
	if !ok || !h.Full {
		t.Fatalf("last hour %+v does not start at a step", h)
	}
	// The window's first sample was taken at that step, by the ticker,
	// before or after the task's get of the same instant, if there was one.
	if made := l.Stats().EmptyGets - base; h.EmptyGets != made && h.EmptyGets != made+1 {
		t.Errorf("last hour: %d empty gets, the listener made %d (%d counting one at the window's first instant)", h.EmptyGets, made, made+1)
	}
	if h.EmptyGets < 11 || h.EmptyGets > 13 {
		t.Errorf("last hour idle with a 5m safety interval: %d empty gets, want 12±1", h.EmptyGets)
	}
	if q.IdleCallsPerHour == nil || *q.IdleCallsPerHour != *h.EmptyGetsPerHour || q.MonthlyCost == nil || *q.MonthlyCost != *h.MonthlyCost {
		t.Fatalf("current rate not the last hour's: idle %v, monthly %v; hour %+v", q.IdleCallsPerHour, q.MonthlyCost, h)
	}
	if want := h.Cost * 720 / time.Duration(h.Elapsed).Hours(); !near(*q.MonthlyCost, want) {
		t.Errorf("monthly cost %v, want %v", *q.MonthlyCost, want)
	}
	oldPerHour = float64(q.Calls["get_empty"]) / up.Hours()
	t.Logf("idle: %.0f empty gets an hour in the last hour (%s), %.0f an hour since start; $%.4f a month", *q.IdleCallsPerHour, time.Duration(h.Elapsed), oldPerHour, *q.MonthlyCost)
	if oldPerHour < 2**q.IdleCallsPerHour {
		t.Errorf("the since-start figure %.0f is close to the windowed %.0f: the replay does not reproduce the issue", oldPerHour, *q.IdleCallsPerHour)
	}
}
