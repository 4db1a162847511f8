package adaptq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
)

// uniqueQueue names a memory:// queue of the process-wide store that no
// other test uses.
var queueSeq atomic.Int64

func uniqueQueue(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1e6, queueSeq.Add(1))
}

// scrape GETs /metrics of the worker at addr (with token, if any) and
// parses it with the Prometheus text parser.
func scrape(t *testing.T, addr, token string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, b := adminSend(t, addr, http.MethodGet, admin.MetricsPath, nil, bearer(token)...)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", admin.MetricsPath, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("parse %s: %v", admin.MetricsPath, err)
	}
	return fams
}

// sample finds the metric of family name whose labels include want.
func sample(fams map[string]*dto.MetricFamily, name string, want ...string) (*dto.Metric, bool) {
	f, ok := fams[name]
	if !ok {
		return nil, false
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(want); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == want[i] && lp.GetValue() == want[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m, true
	}
	return nil, false
}

// value is a counter's or gauge's value, or -1 if the series is absent.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	m, ok := sample(fams, name, labels...)
	if !ok {
		return -1
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return -1
}

func metricsWorker(t *testing.T, yaml string, opts ...Option) *Worker {
	t.Helper()
	w, err := New(testConfig(t, yaml), append([]Option{WithLogger(zap.NewNop())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// A running worker's /metrics, parsed by Prometheus's own text parser,
// counts what it did: every message processed, the one that failed and
// was poisoned, one histogram observation per handler call, backend calls
// by kind; and the Go and process collectors are there.
func TestMetricsCountWhatTheWorkerDid(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("metrics")
	w := metricsWorker(t, `
admin: {address: "127.0.0.1:0"}
queues:
  - url: 'memory://`+name+`'
    handler: work
    max_dequeue_count: 1
    idle: {max: 200ms}
`)
	w.MustHandle("work", func(_ context.Context, m *queue.Message) error {
		if string(m.Body) == "bad" {
			return errors.New("downstream said no")
		}
		return nil
	})
	runWorker(t, w)
	const good = 25
	ctx := context.Background()
	for i := 0; i < good; i++ {
		if _, err := w.Put(ctx, name, []byte(fmt.Sprint("m", i)), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Put(ctx, name, []byte("bad"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	addr := w.AdminAddress()
	var fams map[string]*dto.MetricFamily
	// Wait for every outcome asserted below, not only the runs: processed
	// counts a message when its handler returns and its delete comes
	// after; and one scrape is no snapshot, since the registry collects the
	// histograms and the worker's counters concurrently, so a scrape may
	// show a histogram older than the counters beside it. Waiting for at
	// least the counts wanted lets the checks below catch a count too high.
	count := func(h string) uint64 {
		m, ok := sample(fams, h, "queue", name)
		if !ok || m.Histogram == nil {
			return 0
		}
		return m.Histogram.GetSampleCount()
	}
	waitUntil(t, "every message is processed and deleted, or poisoned, and every run observed", func() bool {
		fams = scrape(t, addr, "")
		return value(fams, "adaptq_messages_processed_total", "queue", name) == good &&
			value(fams, "adaptq_messages_deleted_total", "queue", name) >= good &&
			value(fams, "adaptq_messages_poisoned_total", "queue", name) == 1 &&
			value(fams, "adaptq_messages_failed_total", "queue", name) >= 1 &&
			value(fams, "adaptq_backend_calls_total", "queue", name, "kind", "put") >= good+2 &&
			count("adaptq_handler_duration_seconds") >= good+1 &&
			count("adaptq_handler_dequeue_count") >= good+1
	})
	if got := value(fams, "adaptq_messages_failed_total", "queue", name); got != 1 {
		t.Errorf("adaptq_messages_failed_total = %v, want 1", got)
	}
	if got := value(fams, "adaptq_messages_deleted_total", "queue", name); got != good {
		t.Errorf("adaptq_messages_deleted_total = %v, want %d", got, good)
	}
	for _, h := range []string{"adaptq_handler_duration_seconds", "adaptq_handler_dequeue_count"} {
		m, ok := sample(fams, h, "queue", name)
		if !ok || m.Histogram == nil {
			t.Fatalf("%s{queue=%q} missing", h, name)
		}
		if got := m.Histogram.GetSampleCount(); got != good+1 {
			t.Errorf("%s count = %d, want %d (one per handler call)", h, got, good+1)
		}
	}
	// Every message ran once: every dequeue count is 1.
	dq, _ := sample(fams, "adaptq_handler_dequeue_count", "queue", name)
	if dq.Histogram.GetSampleSum() != good+1 || dq.Histogram.GetBucket()[0].GetCumulativeCount() != good+1 {
		t.Errorf("dequeue counts: sum %v, le=1 %d; want every one 1", dq.Histogram.GetSampleSum(), dq.Histogram.GetBucket()[0].GetCumulativeCount())
	}
	// The puts: ours and the poison queue's one, on the same meter.
	if got := value(fams, "adaptq_backend_calls_total", "queue", name, "kind", "put"); got != good+2 {
		t.Errorf("put calls = %v, want %d", got, good+2)
	}
	if got := value(fams, "adaptq_backend_calls_total", "queue", name, "kind", "get"); got < 1 {
		t.Errorf("get calls = %v, want some", got)
	}
	if got := value(fams, "adaptq_backend_call_errors_total", "queue", name, "kind", "get"); got != 0 {
		t.Errorf("get errors = %v, want 0", got)
	}
	calls := 0.0
	for _, m := range fams["adaptq_backend_calls_total"].GetMetric() {
		calls += m.GetCounter().GetValue()
	}
	if calls < 1 {
		t.Errorf("%v backend calls, want some", calls)
	}
	if got := value(fams, "adaptq_backend_cost_dollars_total", "queue", name); got != 0 {
		t.Errorf("cost = %v for %v calls to a memory queue, want 0 (its calls are free)", got, calls)
	}
	if got := value(fams, "adaptq_tasks_active", "queue", name); got < 1 {
		t.Errorf("adaptq_tasks_active = %v, want at least 1", got)
	}
	if got := value(fams, "adaptq_tasks_started_total", "queue", name); got < 1 {
		t.Errorf("adaptq_tasks_started_total = %v, want at least 1", got)
	}
	if got := value(fams, "adaptq_queue_ready", "queue", name); got != 1 {
		t.Errorf("adaptq_queue_ready = %v, want 1", got)
	}
	if got := value(fams, "adaptq_last_get_success_timestamp_seconds", "queue", name); got <= 0 {
		t.Errorf("adaptq_last_get_success_timestamp_seconds = %v", got)
	}
	for _, f := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := fams[f]; !ok {
			t.Errorf("%s missing: the Go and process collectors are not registered", f)
		}
	}
	for f := range fams {
		if !strings.HasPrefix(f, "adaptq_") && !strings.HasPrefix(f, "go_") && !strings.HasPrefix(f, "process_") && !strings.HasPrefix(f, "promhttp_") {
			t.Errorf("unexpected metric family %s", f)
		}
	}
}

// held blocks every handler until release is closed.
type held struct {
	entered atomic.Int32
	release chan struct{}
}

func (h *held) handle(ctx context.Context, _ *queue.Message) error {
	h.entered.Add(1)
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// The depth the metrics show is read from the backend at most once per
// interval, whatever the number of scrapes (a depth is a billed call on
// Azure and SQS), and tells visible from in-flight messages where the
// driver can.
func TestMetricsReadTheDepthOncePerInterval(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("depth")
	fake := clock.NewFake(time.Time{})
	w := metricsWorker(t, `
admin: {address: "127.0.0.1:0"}
queues:
  - url: 'memory://`+name+`'
    handler: work
    batch_size: 4
    concurrency: 4
    idle: {max: 200ms}
`, withClock(fake))
	h := &held{release: make(chan struct{})}
	w.MustHandle("work", h.handle)
	// Put before the worker starts: its first get takes all three (its
	// idle sleeps run on the fake clock).
	q, err := memory.Default.Queue(name)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := q.Put(context.Background(), []byte("x"), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	runWorker(t, w)
	waitUntil(t, "the handler holds all three", func() bool { return h.entered.Load() == 3 })
	addr := w.AdminAddress()
	fams := scrape(t, addr, "")
	for _, c := range []struct {
		name string
		want float64
	}{
		{"adaptq_queue_messages", 3},
		{"adaptq_queue_visible_messages", 0},
		{"adaptq_queue_in_flight_messages", 3},
		{"adaptq_messages_held", 3},
		{"adaptq_queue_depth_read_timestamp_seconds", unixSeconds(fake.Now())},
	} {
		if got := value(fams, c.name, "queue", name); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	if got := value(fams, "adaptq_queue_oldest_message_age_seconds", "queue", name); got < 0 {
		t.Errorf("adaptq_queue_oldest_message_age_seconds missing (%v)", got)
	}
	close(h.release)
	waitUntil(t, "the three are processed", func() bool {
		fams = scrape(t, addr, "")
		return value(fams, "adaptq_messages_processed_total", "queue", name) == 3
	})
	// Within the interval: the depth is not read again (the scaling agent
	// counts too, so the meter's count calls cannot tell).
	readAt := unixSeconds(fake.Now())
	fake.Advance(DepthIntervalFree - time.Millisecond)
	fams = scrape(t, addr, "")
	if got := value(fams, "adaptq_queue_depth_read_timestamp_seconds", "queue", name); got != readAt {
		t.Errorf("depth read at %v after more scrapes within the interval, want the first read's %v", got, readAt)
	}
	if got := value(fams, "adaptq_queue_messages", "queue", name); got != 3 {
		t.Errorf("adaptq_queue_messages within the interval = %v, want the cached 3", got)
	}
	fake.Advance(time.Millisecond)
	fams = scrape(t, addr, "")
	if got := value(fams, "adaptq_queue_depth_read_timestamp_seconds", "queue", name); got != unixSeconds(fake.Now()) {
		t.Errorf("depth read at %v after the interval, want now %v", got, unixSeconds(fake.Now()))
	}
	if got := value(fams, "adaptq_queue_messages", "queue", name); got != 0 {
		t.Errorf("adaptq_queue_messages after the interval = %v, want 0", got)
	}
	if got := value(fams, "adaptq_queue_oldest_message_age_seconds", "queue", name); got != 0 {
		t.Errorf("adaptq_queue_oldest_message_age_seconds of an empty queue = %v, want 0", got)
	}
}

// billed reports a billed backend.
type billed struct{ driver.Queue }

func (b billed) Features() driver.Features {
	f := b.Queue.Features()
	f.Billed = true
	return f
}

// A billed backend's depth is read once a minute, a free one's every 15 s;
// a backend without driver.DepthReader shows the total alone.
func TestDepthCacheInterval(t *testing.T) {
	t.Parallel()
	store := memory.NewStore()
	free, err := store.Queue("free")
	if err != nil {
		t.Fatal(err)
	}
	if c := newDepthCache(free, clock.Real); c.every != DepthIntervalFree {
		t.Errorf("free backend: interval %s, want %s", c.every, DepthIntervalFree)
	}
	paid, err := store.Queue("paid", queue.WithWrapper(func(d driver.Queue) driver.Queue { return billed{d} }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := paid.Put(context.Background(), []byte("x"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	fake := clock.NewFake(time.Time{})
	c := newDepthCache(paid, fake)
	if c.every != DepthIntervalBilled {
		t.Errorf("billed backend: interval %s, want %s", c.every, DepthIntervalBilled)
	}
	d, at, ok := c.get()
	if !ok || d.Messages != 1 || d.Split || !at.Equal(fake.Now()) {
		t.Errorf("depth through a wrapper without DepthReader = %+v at %v (%v), want 1 message, not split", d, at, ok)
	}
	if _, err := paid.Put(context.Background(), []byte("y"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	fake.Advance(DepthIntervalBilled - time.Second)
	if d, _, _ := c.get(); d.Messages != 1 {
		t.Errorf("depth within the interval = %d, want the cached 1", d.Messages)
	}
	fake.Advance(time.Second)
	if d, _, _ := c.get(); d.Messages != 2 {
		t.Errorf("depth after the interval = %d, want 2", d.Messages)
	}
}

// Two workers in one process keep their metrics apart.
func TestTwoWorkersHaveTheirOwnRegistries(t *testing.T) {
	t.Parallel()
	a, b := uniqueQueue("reg-a"), uniqueQueue("reg-b")
	yaml := func(n string) string {
		return "admin: {address: \"127.0.0.1:0\"}\nqueues: [{url: 'memory://" + n + "', handler: 'exec: cat', idle: {max: 200ms}}]\n"
	}
	wa, wb := metricsWorker(t, yaml(a)), metricsWorker(t, yaml(b))
	runWorker(t, wa)
	runWorker(t, wb)
	fa := scrape(t, wa.AdminAddress(), "")
	if _, ok := sample(fa, "adaptq_tasks_active", "queue", a); !ok {
		t.Errorf("worker a does not show its queue")
	}
	if _, ok := sample(fa, "adaptq_tasks_active", "queue", b); ok {
		t.Errorf("worker a shows worker b's queue")
	}
}
