package adaptqtest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/adaptqtest"
	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
)

func failing(context.Context, *queue.Message) error { return errors.New("inventory: sku unknown") }

// The yardstick: a user's test that a failing message is poisoned
// after max_dequeue_count, with its reason, in ten lines.
func TestFailingMessageIsPoisonedAfterMaxDequeueCount(t *testing.T) {
	k, err := adaptqtest.NewListener("orders", failing, listener.Options{MaxDequeueCount: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	id := k.Put("orders", []byte(`{"sku":"nope"}`))
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	k.RequirePoisoned(t, id, poison.RuleMaxDequeue)

	m := k.Message(id)
	if len(m.Runs) != 3 || m.DequeueCount != 3 || m.Reason != "inventory: sku unknown" {
		t.Errorf("%v; want 3 runs, dequeue count 3, the handler's error as the reason", m)
	}
	// Each retry waited out the 30 s visibility timeout, in virtual time.
	for i := 1; i < len(m.Runs); i++ {
		if d := m.Runs[i].At.Sub(m.Runs[i-1].At); d != listener.DefaultVisibilityTimeout {
			t.Errorf("run %d came %s after the one before, want %s", i+1, d, listener.DefaultVisibilityTimeout)
		}
	}
}

// An hour's Retry-After is waited out exactly: Advance to a minute before
// it leaves the message hidden until then; Settle runs it at the hour.
func TestRetryAfterAnHourInVirtualTime(t *testing.T) {
	t.Parallel()
	var calls sync.Map
	h := func(_ context.Context, m *queue.Message) error {
		if _, again := calls.LoadOrStore(m.ID, true); !again {
			return retryAfter(time.Hour)
		}
		return nil
	}
	k, err := adaptqtest.NewListener("invoices", h, listener.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	id := k.Put("invoices", []byte("INV-7"))
	if err := k.Advance(59 * time.Minute); err != nil {
		t.Fatal(err)
	}
	m := k.Message(id)
	if m.State != adaptqtest.Hidden || len(m.Runs) != 1 || !m.VisibleAt.Equal(m.Runs[0].At.Add(time.Hour)) {
		t.Fatalf("after 59m: %v; want hidden until an hour after its first run", m)
	}
	if want := adaptqtest.Epoch.Add(59 * time.Minute); !k.Now().Equal(want) {
		t.Errorf("Advance(59m) ended at %v, want exactly %v", k.Now(), want)
	}
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	k.RequireHandled(t, id)
	if m = k.Message(id); len(m.Runs) != 2 || m.Runs[1].At.Sub(m.Runs[0].At) != time.Hour || m.Runs[1].DequeueCount != 2 {
		t.Errorf("%v, runs %+v; want the second run an hour after the first, dequeue count 2", m, m.Runs)
	}
}

type retryAfter time.Duration

func (r retryAfter) Error() string             { return "503 busy" }
func (r retryAfter) RetryAfter() time.Duration { return time.Duration(r) }

// A message that fails for as long as it lives, each retry a day apart,
// is poisoned as its 7-day time-to-live ends (rule expiring: too little
// is left for another retry): a week of virtual time.
func TestSevenDayTTLInVirtualTime(t *testing.T) {
	t.Parallel()
	k, err := adaptqtest.NewListener("work", failing, listener.Options{MaxDequeueCount: 1000, VisibilityTimeout: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	q, err := k.Queue("work")
	if err != nil {
		t.Fatal(err)
	}
	id, err := q.Put(context.Background(), []byte("x"), queue.PutOptions{TTL: 7 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	m := k.Message(id)
	expiry := adaptqtest.Epoch.Add(7 * 24 * time.Hour)
	if m.State != adaptqtest.Poisoned || m.Rule != poison.RuleExpiring || len(m.Runs) < 7 {
		t.Fatalf("%v at %v, runs %+v, stats %+v; want poisoned (expiring) after at least 7 runs, before %v", m, k.Now(), m.Runs, k.Listener("work").Stats(), expiry)
	}
	for day := 1; day < 7; day++ {
		if d := m.Runs[day].At.Sub(m.Runs[day-1].At); d != 24*time.Hour {
			t.Errorf("run %d came %s after the one before, want the 24h visibility timeout", day+1, d)
		}
	}
	for i := 7; i < len(m.Runs); i++ {
		if d := m.Runs[i].At.Sub(m.Runs[i-1].At); d < listener.MinRetryHide {
			t.Errorf("run %d came %s after the one before, below listener.MinRetryHide", i+1, d)
		}
	}
	if last := m.Runs[len(m.Runs)-1].At; !last.Before(expiry) {
		t.Errorf("a run at %v, after the expiry", last)
	}
}

// charger charges an order each time it runs, or, idempotent, once.
type charger struct {
	idempotent bool
	mu         sync.Mutex
	charges    map[string]int
}

func (c *charger) handle(_ context.Context, m *queue.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.idempotent || c.charges[string(m.Body)] == 0 {
		c.charges[string(m.Body)]++
	}
	return nil
}

// LoseDeletes makes a message run again after a success, so a handler
// that is not idempotent charges twice, and an idempotent one once.
func TestLostDeleteShowsANonIdempotentHandler(t *testing.T) {
	t.Parallel()
	for _, idem := range []bool{false, true} {
		c := &charger{idempotent: idem, charges: map[string]int{}}
		k, err := adaptqtest.NewListener("orders", c.handle, listener.Options{})
		if err != nil {
			t.Fatal(err)
		}
		k.LoseDeletes(1)
		id := k.Put("orders", []byte("A1"))
		other := k.Put("orders", []byte("A2"))
		if err := k.Settle(); err != nil {
			t.Fatal(err)
		}
		k.RequireHandled(t, id)
		k.RequireHandled(t, other)
		m := k.Message(id)
		if len(m.Runs) != 2 || m.Runs[1].DequeueCount != 2 || m.Runs[1].At.Sub(m.Runs[0].At) != listener.DefaultVisibilityTimeout {
			t.Errorf("%v, runs %+v; want a second run a visibility timeout after the first", m, m.Runs)
		}
		if n := len(k.Message(other).Runs); n != 1 {
			t.Errorf("the other message ran %d times; only one delete was to be lost", n)
		}
		want := 2
		if idem {
			want = 1
		}
		if got := c.charges["A1"]; got != want {
			t.Errorf("idempotent %v: A1 charged %d times, want %d", idem, got, want)
		}
		if err := k.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// tb records what a Require helper reports.
type tb struct {
	testing.TB
	errs []string
}

func (t *tb) Helper()                        {}
func (t *tb) Errorf(format string, a ...any) { t.errs = append(t.errs, sprintf(format, a...)) }

// The Require helpers hold when they should, and report the message's id,
// dequeue count and last error when they do not.
func TestRequireHelpersReportWhatHappened(t *testing.T) {
	t.Parallel()
	k, err := adaptqtest.NewListener("orders", failing, listener.Options{MaxDequeueCount: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	id := k.Put("orders", []byte("x"))
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	rec := &tb{TB: t}
	if !k.RequirePoisoned(rec, id, poison.RuleMaxDequeue) || !k.RequirePoisoned(rec, id, "") || len(rec.errs) != 0 {
		t.Fatalf("RequirePoisoned of a poisoned message failed: %q", rec.errs)
	}
	if k.RequireHandled(rec, id) || k.RequirePoisoned(rec, id, poison.RulePermanent) || len(rec.errs) != 2 {
		t.Fatalf("wrong expectations held: %q", rec.errs)
	}
	for _, e := range rec.errs {
		for _, want := range []string{"message " + id + " ", "poisoned (max_dequeue_count) after 2 runs", "dequeue count 2", "last error: inventory: sku unknown"} {
			if !strings.Contains(e, want) {
				t.Errorf("report %q lacks %q", e, want)
			}
		}
	}
	if k.RequireHandled(rec, "999") || !strings.Contains(rec.errs[2], "unknown") {
		t.Errorf("a message never put: %q", rec.errs[2:])
	}
}

// A production config loads without its drivers, on memory queues named
// as in production, every other key as written; the worker runs it.
func TestWorkerRunsAProductionConfig(t *testing.T) {
	t.Parallel()
	cfg, err := adaptqtest.LoadConfig(filepath.Join("testdata", "production.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	for _, q := range cfg.Queues {
		urls = append(urls, q.URL)
	}
	if got := strings.Join(urls, " "); got != "memory://orders memory://invoices memory://emails" {
		t.Fatalf("urls: %s", got)
	}
	if cfg.Queues[0].MaxDequeueCount != 3 || cfg.Queues[0].VisibilityTimeout != time.Minute || !cfg.Queues[2].Trigger.Enabled {
		t.Fatalf("the file's other keys were not kept: %+v", cfg.Queues)
	}
	sent := make(chan string, 10)
	k, err := adaptqtest.NewWorker(cfg, map[string]handler.Func{
		"orders":  failing,
		"billing": func(context.Context, *queue.Message) error { return nil },
		"emails":  handler.String(func(_ context.Context, s string) error { sent <- s; return nil }),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	order, invoice, email := k.Put("orders", []byte("o")), k.Put("invoices", []byte("i")), k.Put("emails", []byte("hello"))
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	k.RequirePoisoned(t, order, poison.RuleMaxDequeue)
	k.RequireHandled(t, invoice)
	k.RequireHandled(t, email)
	if m := k.Message(order); len(m.Runs) != 3 || m.Runs[1].At.Sub(m.Runs[0].At) != time.Minute {
		t.Errorf("%v: want 3 runs a minute apart (the file's max_dequeue_count and visibility_timeout)", m)
	}
	if s := <-sent; s != "hello" || len(sent) != 0 {
		t.Errorf("emails handler got %q, and %d more", s, len(sent))
	}
	for _, id := range []string{invoice, email} {
		if n := len(k.Message(id).Runs); n != 1 {
			t.Errorf("message %s ran %d times, want once", id, n)
		}
	}
	if st := k.Listener("orders").Stats(); st.Poisoned != 1 {
		t.Errorf("orders listener stats: %+v", st)
	}
}

// Mistakes in the file, or a handler the program does not register, fail
// the test as they would fail the worker, naming the field.
func TestConfigMistakesFailTheTest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(yaml string) string {
		p := filepath.Join(dir, "adaptq.yaml")
		if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct{ yaml, want string }{
		{"queues:\n  - url: sqlite://x.db?queue=orders\n    batch_size: 40\n", "queues[0].batch_size: 40 is above 32"},
		{"queues:\n  - url: sqlite://x.db?queue=orders\n    visiblity_timeout: 1m\n", `did you mean "visibility_timeout"`},
		{"queues:\n  - url: postgres://u@h/db\n", "queues[0].url: cannot tell the queue's name"},
	} {
		if _, err := adaptqtest.LoadConfig(write(c.yaml)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one saying %q", c.yaml, err, c.want)
		}
	}
	cfg, err := adaptqtest.LoadConfig(write("queues:\n  - url: sqlite://x.db?queue=orders\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := adaptqtest.NewWorker(cfg, map[string]handler.Func{"order": failing}); !errors.Is(err, adaptq.ErrNoHandler) {
		t.Errorf("a handler registered under another name: %v, want ErrNoHandler", err)
	}
	cfg.Queues[0].URL = "sqlite://x.db?queue=orders"
	if _, err := adaptqtest.NewWorker(cfg, nil); err == nil || !strings.Contains(err.Error(), "not a memory:// queue") {
		t.Errorf("a non-memory url: %v", err)
	}
}

// The kit compiles no network driver into a test binary.
func TestImportsNoNetworkDriver(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range []string{"/queue/sqlite", "/queue/postgres", "/queue/redis", "/queue/azure", "/queue/sqs", "/queue/all", "github.com/Azure/", "github.com/aws/", "github.com/jackc/", "github.com/redis/", "modernc.org/sqlite"} {
			if strings.Contains(dep, bad) {
				t.Errorf("adaptqtest depends on %s", dep)
			}
		}
	}
}

// A message that can never settle (it never expires, and its handler
// fails forever below max_dequeue_count) makes Settle give up after
// SettleLimit of virtual time, naming it, its state and its last error.
func TestSettleNamesWhatNeverSettles(t *testing.T) {
	t.Parallel()
	k, err := adaptqtest.NewListener("work", failing, listener.Options{MaxDequeueCount: 1 << 30, VisibilityTimeout: queue.MaxVisibilityTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	q, err := k.Queue("work")
	if err != nil {
		t.Fatal(err)
	}
	id, err := q.Put(context.Background(), []byte("x"), queue.PutOptions{TTL: queue.NoExpiry})
	if err != nil {
		t.Fatal(err)
	}
	err = k.Settle()
	if err == nil {
		t.Fatal("Settle settled a message that never settles")
	}
	for _, want := range []string{"1 messages unsettled after " + adaptqtest.SettleLimit.String(), "message " + id + " of queue \"work\": hidden until", "after 2 runs", "last error: inventory: sku unknown"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Settle: %v; want it to say %q", err, want)
		}
	}
	if want := adaptqtest.Epoch.Add(adaptqtest.SettleLimit); !k.Now().Equal(want) {
		t.Errorf("gave up at %v, want %v", k.Now(), want)
	}
}

// Many messages on a worker with a push trigger and a pool that may grow
// (as its agent finds them, in real time): each runs exactly once, since the clock never moves while a batch is still
// being handled or deleted (else its messages would show again and run
// twice).
func TestManyMessagesRunOnceEach(t *testing.T) {
	t.Parallel()
	cfg, err := adaptq.ParseConfig("test", []byte(`
queues:
  - url: memory://jobs
    trigger: {enabled: true}
    pool: {policy: proportional, messages_per_task: 16, max: 8}
    visibility_timeout: 10s
`))
	if err != nil {
		t.Fatal(err)
	}
	k, err := adaptqtest.NewWorker(cfg, map[string]handler.Func{"jobs": func(context.Context, *queue.Message) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	const n = 300
	ids := make([]string, n)
	for i := range ids {
		ids[i] = k.Put("jobs", []byte{byte(i)})
		if i%100 == 99 {
			if err := k.Advance(time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if m := k.Message(id); m.State != adaptqtest.Deleted || len(m.Runs) != 1 {
			t.Fatalf("%v; want deleted after one run", m)
		}
	}
	if st := k.Listener("jobs").Stats(); st.Deleted != n || st.DeleteErrors != 0 || st.ReceiptMismatches != 0 {
		t.Errorf("stats %+v; want every message deleted once", st)
	}
}
