package adaptq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
)

func TestBatchHandlerConfigIsParsedAndValidated(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, `
queues:
  - url: sqlite://$DIR/w.db?queue=rows
    batch_handler: {max: 50, wait: 200ms}
`)
	if b := cfg.Queues[0].BatchHandler; b.Max != 50 || b.Wait != 200*time.Millisecond {
		t.Fatalf("batch_handler %+v, want max 50, wait 200ms", b)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"batch_handler: {max: -1}", "queues[0].batch_handler.max: -1 is outside 1..10000"},
		{"batch_handler: {max: 10001}", "queues[0].batch_handler.max: 10001 is outside 1..10000"},
		{"batch_handler: {wait: -1s}", "queues[0].batch_handler.wait: -1s is negative"},
		{"batch_handler: {wait: 5}", "queues[0].batch_handler.wait"},
		{"batch_handler: {maks: 5}", "queues[0].batch_handler.maks"},
		{"concurrency: auto\n    batch_handler: {max: 5}", "queues[0].batch_handler: is set with concurrency auto"},
		{"new_batch_threshold: 4\n    batch_handler: {max: 5}", "queues[0].new_batch_threshold: 4 is set with batch_handler"},
		{"new_batch_threshold: 0\n    batch_handler: {max: 5}", "queues[0].new_batch_threshold: 0 is set with batch_handler"},
		{"handler: 'exec: /bin/true'\n    batch_handler: {max: 5}", `queues[0].batch_handler: is for a batch handler (Worker.HandleBatch); handler "exec: /bin/true" handles one message`},
	} {
		y := "queues:\n  - url: sqlite://" + t.TempDir() + "/w.db?queue=rows\n    " + tc.yaml + "\n"
		_, err := parseConfig("test.yaml", []byte(y), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

type row struct {
	N int `json:"n"`
}

// A batch handler registered from Go runs in calls; each message has its
// own outcome; the metrics time calls and count their sizes.
func TestWorkerRunsABatchHandler(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, `
queues:
  - url: sqlite://$DIR/w.db?queue=rows
    idle: {max: 200ms}
    batch_handler: {max: 40, wait: 50ms}
    max_dequeue_count: 1
`)
	var wrapped atomic.Int64
	count := func(next handler.BatchFunc) handler.BatchFunc {
		return func(ctx context.Context, ms []*queue.Message) []error {
			wrapped.Add(1)
			return next(ctx, ms)
		}
	}
	w, err := New(cfg, WithLogger(zap.NewNop()), WithBatchMiddleware(count))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[int]int{}
	var sizes []int
	w.MustHandleBatch("rows", handler.JSONBatch(func(_ context.Context, rs []row) []error {
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, len(rs))
		res := make([]error, len(rs))
		for i, r := range rs {
			seen[r.N]++
			if r.N == 7 {
				res[i] = errors.New("row 7 refused")
			}
		}
		return res
	}))
	if err := w.Handle("rows", func(context.Context, *queue.Message) error { return nil }); err == nil {
		t.Error("Handle took a name HandleBatch had registered")
	}
	// Put before the run, so that the first call fills.
	ctx := context.Background()
	stop := runWorker(t, w)
	for i := 0; i < 100; i++ {
		if _, err := w.Put(ctx, "rows", fmt.Appendf(nil, `{"n":%d}`, i), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Put(ctx, "rows", []byte("not json"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	l, _ := w.Listener("rows")
	waitUntil(t, "99 deleted, 2 poisoned", func() bool {
		st := l.Stats()
		return st.Deleted == 99 && st.Poisoned == 2
	})
	st := l.Stats()
	mu.Lock()
	calls := len(sizes)
	for _, s := range sizes {
		if s > 40 {
			t.Errorf("a call of %d, above max 40", s)
		}
	}
	mu.Unlock()
	// A call whose bodies none decode does not reach JSONBatch's func.
	if int64(calls) > st.Calls || int64(calls) < st.Calls-1 || wrapped.Load() != st.Calls {
		t.Errorf("%d calls seen, %d through WithBatchMiddleware, Stats.Calls %d", calls, wrapped.Load(), st.Calls)
	}
	if o := l.Options(); o.BatchMax != 40 || o.BatchWait != 50*time.Millisecond || o.Concurrency != listener.DefaultBatchConcurrency {
		t.Errorf("listener options: max %d, wait %s, concurrency %d", o.BatchMax, o.BatchWait, o.Concurrency)
	}
	mfs, err := w.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var durations, sizeCount, sizeSum uint64 = 0, 0, 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "adaptq_handler_duration_seconds":
				durations = m.GetHistogram().GetSampleCount()
			case "adaptq_handler_batch_size":
				sizeCount = m.GetHistogram().GetSampleCount()
				sizeSum = uint64(m.GetHistogram().GetSampleSum())
			}
		}
	}
	if durations != uint64(st.Calls) || sizeCount != uint64(st.Calls) || sizeSum != 101 {
		t.Errorf("metrics: %d durations, %d sizes summing to %d; want %d calls of 101 messages in all", durations, sizeCount, sizeSum, st.Calls)
	}
	if ws := w.Stats(ctx); len(ws.Queues) != 1 || ws.Queues[0].BatchCalls != st.Calls {
		t.Errorf("/v1/stats shows %+v, want %d batch calls", ws.Queues, st.Calls)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// batch_handler on a queue whose handler handles one message is refused
// at start-up, naming the field.
func TestBatchHandlerConfigNeedsABatchHandler(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, `
admin: {address: ""}
queues:
  - url: sqlite://$DIR/w.db?queue=rows
    batch_handler: {max: 5}
`)
	w, err := New(cfg, WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	w.MustHandle("rows", func(context.Context, *queue.Message) error { return nil })
	err = w.Run(context.Background())
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), `queues[0] (rows).batch_handler: is for a batch handler (Worker.HandleBatch); handler "rows" handles one message`) {
		t.Fatalf("Run: %v", err)
	}
}

// new_batch_threshold on a queue whose handler, registered from Go, is a
// batch handler is refused at start-up, naming the field and the value:
// its pool bounds the gets, and the threshold would be silently ignored.
func TestNewBatchThresholdWithABatchHandlerIsRefused(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, `
admin: {address: ""}
queues:
  - url: sqlite://$DIR/w.db?queue=rows
    new_batch_threshold: 3
`)
	w, err := New(cfg, WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	w.MustHandleBatch("rows", func(_ context.Context, ms []*queue.Message) []error { return make([]error, len(ms)) })
	// Run returns its refusal, or (the bug) the worker gets ready and runs.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	returned := false
	waitUntil(t, "Run refuses or the worker is ready", func() bool {
		select {
		case err = <-errc:
			returned = true
		default:
		}
		ready, _ := w.Readiness()
		return returned || ready
	})
	cancel()
	if !returned {
		err = <-errc
		t.Fatalf("the worker ran with new_batch_threshold and a batch handler (Run: %v)", err)
	}
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), `queues[0] (rows): new_batch_threshold: 3 is set for a batch handler`) {
		t.Fatalf("Run: %v", err)
	}
}

// A batch handler's concurrency counts calls: left out of the file it is
// listener.DefaultBatchConcurrency, and any number written is that many
// calls, 64 too (the single handler's default, which an explicit value
// must not be mistaken for: 63 and 65 were read as written, 64 as 2).
func TestBatchHandlerExplicitConcurrencyIsHonoured(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line string
		want int
	}{
		{"", listener.DefaultBatchConcurrency},
		{"concurrency: 63", 63},
		{"concurrency: 64", 64},
		{"concurrency: 65", 65},
	} {
		cfg := testConfig(t, `
admin: {address: ""}
queues:
  - url: sqlite://$DIR/w.db?queue=rows
    batch_handler: {max: 5}
    `+tc.line+`
`)
		w, err := New(cfg, WithLogger(zap.NewNop()))
		if err != nil {
			t.Fatal(err)
		}
		w.MustHandleBatch("rows", func(context.Context, []*queue.Message) []error { return nil })
		stop := runWorker(t, w)
		l, _ := w.Listener("rows")
		if c := l.Options().Concurrency; c != tc.want {
			t.Errorf("%q: the listener runs %d calls at once, want %d", tc.line, c, tc.want)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	// From the environment too.
	y := "queues:\n  - url: sqlite://" + t.TempDir() + "/w.db?queue=rows\n"
	cfg, err := parseConfig("test.yaml", []byte(y), []string{"ADAPTQ_QUEUES_0_CONCURRENCY=64"})
	if err != nil || !cfg.Queues[0].concurrencySet || cfg.Queues[0].Concurrency != 64 {
		t.Errorf("ADAPTQ_QUEUES_0_CONCURRENCY=64: %v, concurrency %s, set %v", err, cfg.Queues[0].Concurrency, cfg.Queues[0].concurrencySet)
	}
}
