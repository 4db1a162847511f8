package adaptq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/internal/testutil"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/queue/poison"
)

func testConfig(t *testing.T, yaml string) Config {
	t.Helper()
	yaml = strings.ReplaceAll(yaml, "$DIR", t.TempDir())
	cfg, err := parseConfig("test.yaml", []byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// runWorker runs w until the test ends; it returns a stop func that
// returns Run's error.
func runWorker(t *testing.T, w *Worker) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-w.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("Run: %v", err)
	case <-time.After(testutil.HangGuard):
		t.Fatal("worker did not start")
	}
	var once sync.Once
	var err error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(testutil.HangGuard):
				err = errors.New("Run did not return")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func TestWorkerProcessesEveryMessageOnTheEmbeddedDefault(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, `
admin: {address: "127.0.0.1:0"}
queues:
  - url: sqlite://$DIR/w.db?queue=orders
    idle: {max: 200ms}
  - url: sqlite://$DIR/w.db?queue=mail
    handler: send-mail
    idle: {max: 200ms}
`)
	w, err := New(cfg, WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	record := func(prefix string) func(context.Context, *queue.Message) error {
		return func(_ context.Context, m *queue.Message) error {
			mu.Lock()
			seen[prefix+string(m.Body)]++
			mu.Unlock()
			return nil
		}
	}
	w.MustHandle("orders", record("o"))
	w.MustHandle("send-mail", record("m"))
	stop := runWorker(t, w)
	ctx := context.Background()
	for i := 0; i < 500; i++ {
		if _, err := w.Put(ctx, "orders", []byte(fmt.Sprint(i)), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Put(ctx, "mail", []byte(fmt.Sprint(i)), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "1,000 messages are handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 1000
	})
	waitUntil(t, "both queues are empty", func() bool {
		st := w.Stats(ctx)
		return len(st.Queues) == 2 && st.Queues[0].Depth == 0 && st.Queues[1].Depth == 0 &&
			st.Queues[0].Deleted == 500 && st.Queues[1].Deleted == 500
	})

	// The admin endpoint serves the same stats.
	resp, err := http.Get("http://" + w.AdminAddress() + admin.StatsPath)
	if err != nil {
		t.Fatal(err)
	}
	var st admin.Stats
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Queues) != 2 || st.Queues[0].Name != "orders" || st.Queues[1].Name != "mail" {
		t.Fatalf("stats queues: %+v", st.Queues)
	}
	o := st.Queues[0]
	if o.Calls["put"] != 500 || o.Processed != 500 || o.TotalCalls < 500 || o.Cost != 0 || o.PricePer10k != 0 || o.CallsPerMessage < 1 {
		t.Errorf("orders stats: %+v", o)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("%s handled %d times", k, n)
		}
	}
	if _, err := w.Put(ctx, "orders", []byte("late"), queue.PutOptions{}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("Put after shutdown = %v, want ErrNotRunning", err)
	}
}

func TestStartupErrorsNameTheQueue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"handler not registered", "queues: [{url: 'memory://orders-a'}]",
			`queues[0] (orders-a).handler: no handler registered: "orders-a" (registered: none)`},
		{"named handler not registered", "queues: [{url: 'memory://orders-b', handler: billing}]",
			`queues[0].handler: no handler registered: "billing"`},
		{"bad sqlite URL", "queues: [{url: 'sqlite:///tmp/x.db'}]", `queues[0].url:`},
		{"name and url disagree", "queues: [{name: abc, url: 'memory://xyz', handler: 'exec: cat'}]", `queues[0].name: "abc" but the url opens queue "xyz"`},
		{"poison queue is the queue, name from the url", "queues: [{url: 'memory://selfp', handler: 'exec: cat', poison_queue: selfp}]",
			`queues[0] (selfp).poison_queue: "selfp" is the queue itself`},
		{"exec command missing", "queues: [{url: 'memory://ex-a', handler: 'exec: /no/such/program'}]", `/no/such/program`},
		{"admin port taken", "admin: {address: '$ADDR'}\nqueues: [{url: 'memory://ad-a', handler: 'exec: cat'}]", "admin.address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yaml := tc.yaml
			if strings.Contains(yaml, "$ADDR") {
				blocker := &http.Server{}
				ln, err := newLocalListener()
				if err != nil {
					t.Fatal(err)
				}
				go func() { _ = blocker.Serve(ln) }()
				defer blocker.Close()
				yaml = strings.ReplaceAll(yaml, "$ADDR", ln.Addr().String())
			}
			if !strings.Contains(yaml, "admin:") {
				// The admin endpoint binds before the queues open: keep it off the
				// default port, which a worker on this machine may hold.
				yaml = "admin: {address: ''}\n" + yaml
			}
			cfg := testConfig(t, yaml)
			w, err := New(cfg, WithLogger(zap.NewNop()))
			if err != nil {
				t.Fatal(err)
			}
			err = w.Run(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestAdminTokenIsRequired(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, `
admin: {address: "127.0.0.1:0", token: "worker-Cv2nXr8kLm"}
queues: [{url: 'memory://token-q', handler: 'exec: cat'}]
`)
	w, err := New(cfg, WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	runWorker(t, w)
	get := func(path, token string) int {
		req, _ := http.NewRequest("GET", "http://"+w.AdminAddress()+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get(admin.StatsPath, ""); c != http.StatusUnauthorized {
		t.Errorf("stats without a token: %d", c)
	}
	if c := get(admin.StatsPath, "wrong"); c != http.StatusUnauthorized {
		t.Errorf("stats with a wrong token: %d", c)
	}
	if c := get(admin.StatsPath, "worker-Cv2nXr8kLm"); c != http.StatusOK {
		t.Errorf("stats with the token: %d", c)
	}
	if c := get(admin.HealthPath, ""); c != http.StatusOK {
		t.Errorf("health check: %d", c)
	}
}

func TestExecHandlerFromConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := filepath.Join(dir, "out.txt")
	cfg := testConfig(t, fmt.Sprintf(`
queues:
  - url: sqlite://%s/e.db?queue=jobs
    handler: "exec: sh -c 'body=$(cat); echo \"$ADAPTQ_QUEUE=$body\" >> %s'"
    idle: {max: 200ms}
`, dir, out))
	cfg.Admin.Address = ""
	w, err := New(cfg, WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	stop := runWorker(t, w)
	for _, b := range []string{"alpha", "beta"} {
		if _, err := w.Put(context.Background(), "jobs", []byte(b), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "both ran", func() bool {
		data, _ := os.ReadFile(out)
		return strings.Count(string(data), "\n") == 2
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(out)
	for _, want := range []string{"jobs=alpha\n", "jobs=beta\n"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("output %q lacks %q", data, want)
		}
	}
}

func TestWorkerPoisonsFailingMessages(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, `
queues:
  - url: sqlite://$DIR/p.db?queue=jobs
    visibility_timeout: 1s
    max_dequeue_count: 2
    idle: {max: 100ms}
  - url: sqlite://$DIR/p.db?queue=other
    poison_queue: jobs-poison
    idle: {max: 100ms}
`)
	cfg.Admin.Address = ""
	w, err := New(cfg, WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	var runs sync.Map
	fail := func(_ context.Context, m *queue.Message) error {
		n, _ := runs.LoadOrStore(string(m.Body), new(int))
		*n.(*int)++
		return errors.New("fails")
	}
	w.MustHandle("jobs", fail)
	w.MustHandle("other", func(context.Context, *queue.Message) error { return handler.Permanent(errors.New("bad body")) })
	runWorker(t, w)
	ctx := context.Background()
	if _, err := w.Put(ctx, "jobs", []byte("j"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// A poison queue may be shared: "other" poisons into jobs-poison too,
	// at once since its failure is permanent.
	if _, err := w.Put(ctx, "other", []byte("{"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	pq, err := queue.Open(ctx, "sqlite://"+strings.TrimPrefix(strings.Split(cfg.Queues[0].URL, "?")[0], "sqlite://")+"?queue=jobs-poison")
	if err != nil {
		t.Fatal(err)
	}
	defer pq.Close()
	waitUntil(t, "both reach the shared poison queue", func() bool {
		n, _ := pq.Count(ctx)
		return n == 2
	})
	if n, _ := runs.Load("j"); *n.(*int) != 2 {
		t.Errorf("the job ran %d times before poisoning, want max_dequeue_count 2", *n.(*int))
	}
	// The stats (GET /v1/stats, the status page) count each queue's own.
	waitUntil(t, "the stats count one poisoned message per queue", func() bool {
		st := w.Stats(ctx)
		return len(st.Queues) == 2 && st.Queues[0].Poisoned == 1 && st.Queues[1].Poisoned == 1
	})
	// Each poison message says where it came from and why.
	p, err := w.PoisonList(ctx, "jobs", "", 0)
	if err != nil || len(p.Messages) != 2 {
		t.Fatalf("PoisonList: %+v, %v", p, err)
	}
	for _, m := range p.Messages {
		switch m.Queue {
		case "jobs":
			if m.DequeueCount != 2 || m.Rule != poison.RuleMaxDequeue || m.Reason != "fails" {
				t.Errorf("jobs' poison message %+v: want dequeue count 2 and the handler's error", m)
			}
		case "other":
			if m.DequeueCount != 1 || m.Rule != poison.RulePermanent || !strings.Contains(m.Reason, "bad body") {
				t.Errorf("other's poison message %+v: want dequeue count 1 and the permanent error", m)
			}
		default:
			t.Errorf("poison message %+v from no configured queue", m)
		}
	}
	// Requeue from a shared poison queue sends each back where it came from.
	from := map[string]string{p.Messages[0].ID: p.Messages[0].Queue, p.Messages[1].ID: p.Messages[1].Queue}
	res, err := w.PoisonRequeue(ctx, "jobs", poison.Selection{All: true})
	if err != nil || len(res.Done) != 2 || len(res.Failed) != 0 {
		t.Fatalf("PoisonRequeue: %+v, %v", res, err)
	}
	for _, d := range res.Done {
		if d.Queue != from[d.ID] {
			t.Errorf("%s went back to %q, want %q", d.ID, d.Queue, from[d.ID])
		}
	}
}

func TestTriggerOverHTTPWakesTheWorker(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, `
admin: {address: "127.0.0.1:0", token: trigger-Ae7yPw4qZs}
queues:
  - url: sqlite://$DIR/t.db?queue=events
    trigger: {enabled: true, safety_interval: 1h}
    idle: {max: 1m}
`)
	// The worker's clock moves only by the trigger floor (5 ms: SQLite's
	// calls are not billed, so the latency target is 10 ms), less than the
	// task's first idle sleep (at least 9 ms): only a trigger can make it
	// get again.
	fake := clock.NewFake(time.Time{})
	w, err := New(cfg, WithLogger(zap.NewNop()), withClock(fake))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 10)
	w.MustHandle("events", func(_ context.Context, m *queue.Message) error { got <- string(m.Body); return nil })
	runWorker(t, w)
	l, _ := w.Listener("events")
	waitUntil(t, "the task sleeps", func() bool { st, _ := l.State(context.Background()); return st.IdleTasks == 1 })
	// Another process puts (here: a second handle on the file, which does
	// not notify), then pulls the trigger over HTTP.
	ctx := context.Background()
	q, err := queue.Open(ctx, cfg.Queues[0].URL)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.Put(ctx, []byte("wake"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := admin.SendTrigger(ctx, w.AdminAddress(), "wrong", "events"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("trigger with a wrong token: %v", err)
	}
	if err := admin.SendTrigger(ctx, w.AdminAddress(), "trigger-Ae7yPw4qZs", "nosuch"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("trigger of an unknown queue: %v", err)
	}
	if err := admin.SendTrigger(ctx, w.AdminAddress(), "trigger-Ae7yPw4qZs", "events"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the woken task waits out the trigger floor", func() bool {
		for _, d := range fake.Deadlines() {
			if d == 5*time.Millisecond {
				return true
			}
		}
		return false
	})
	fake.Advance(5 * time.Millisecond)
	select {
	case b := <-got:
		if b != "wake" {
			t.Fatalf("got %q", b)
		}
	case <-time.After(testutil.HangGuard):
		t.Fatal("the trigger did not wake the worker")
	}
	if l.Stats().Triggers < 1 {
		t.Error("no trigger counted")
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, what, cond)
}

// A trigger with no admin endpoint and no native notify can be pulled only
// from the worker's own process: the worker says so at start-up when the
// trigger makes idle polling slower (safety_interval above idle.max), and
// keeps quiet with the default trigger, whose polling is as without one.
func TestTriggerWithoutAdminAddressWarns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		trigger string
		warns   int
	}{
		{"{enabled: true, safety_interval: 5m}", 1},
		{"{}", 0}, // the default: on, safety_interval idle.max
	} {
		cfg := testConfig(t, `
admin: {address: ""}
queues: [{url: 'sqlite://$DIR/w.db?queue=warn-q', handler: 'exec: cat', trigger: `+tc.trigger+`}]
`)
		core, logs := observer.New(zap.WarnLevel)
		w, err := New(cfg, WithLogger(zap.New(core)))
		if err != nil {
			t.Fatal(err)
		}
		stop := runWorker(t, w)
		<-w.Ready()
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		found := logs.FilterMessageSnippet("admin.address is empty").FilterField(zap.String("queue", "warn-q"))
		if found.Len() != tc.warns {
			t.Errorf("trigger: %s: want %d warnings naming the queue, got %v", tc.trigger, tc.warns, logs.All())
		}
	}
}

func TestCallPriceIsZeroWhereCallsAreFree(t *testing.T) {
	for _, tc := range []struct {
		name       string
		configured float64
		f          driver.Features
		want       float64
	}{
		{"free backend, default price", meter.DefaultPricePer10k, driver.Features{}, 0},
		{"free backend, a price configured", 0.05, driver.Features{PricePer10k: 0.05}, 0},
		{"billed, default price, the backend's list price", meter.DefaultPricePer10k, driver.Features{Billed: true, PricePer10k: 0.004}, 0.004},
		{"billed, a price configured", 0.02, driver.Features{Billed: true, PricePer10k: 0.004}, 0.02},
		{"billed, no list price", meter.DefaultPricePer10k, driver.Features{Billed: true}, meter.DefaultPricePer10k},
	} {
		if got := callPrice(tc.configured, tc.f); got != tc.want {
			t.Errorf("%s: callPrice(%v, %+v) = %v, want %v", tc.name, tc.configured, tc.f, got, tc.want)
		}
	}
}
