package adaptq

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/scaling"
)

// backendSwitch makes every get fail while down is set (with an error
// that quotes a URL with a signature, as a cloud client's may), and hangs
// every get while hang is set, until it is cleared.
type backendSwitch struct {
	down, hang atomic.Bool
	released   chan struct{} // closed and replaced when hang is cleared
}

func newBackendSwitch() *backendSwitch { return &backendSwitch{released: make(chan struct{})} }

type switchedQueue struct {
	driver.Queue
	s *backendSwitch
}

func (s *backendSwitch) wrap(d driver.Queue) driver.Queue { return &switchedQueue{Queue: d, s: s} }

var errUnreachable = errors.New(`Get "https://acct.queue.example/q?sig=TOPSECRET": connection refused`)

func (q *switchedQueue) Get(ctx context.Context, n int, vis time.Duration) ([]*driver.Message, error) {
	if q.s.down.Load() {
		return nil, driver.Transient(errUnreachable, 0)
	}
	for q.s.hang.Load() {
		select {
		case <-q.s.released:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return q.Queue.Get(ctx, n, vis)
}

// readyz GETs /readyz and returns the status and body.
func readyz(t *testing.T, addr string) (int, string) {
	t.Helper()
	resp, b := adminSend(t, addr, http.MethodGet, admin.ReadyPath, nil)
	return resp.StatusCode, string(b)
}

// /readyz answers 503, naming the queue and its last get's error (without
// the URL's secret), while the backend refuses gets, and 200 again once it
// answers; /healthz answers 200 throughout.
func TestReadyzFlipsWhenTheBackendGoesAway(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("ready")
	sw := newBackendSwitch()
	w := metricsWorker(t, `
admin: {address: "127.0.0.1:0"}
queues:
  - url: 'memory://`+name+`'
    handler: 'exec: cat'
    idle: {min: 10ms, max: 100ms, delta: 10ms}
`, withQueueOptions(queue.WithWrapper(sw.wrap)))
	runWorker(t, w)
	addr := w.AdminAddress()
	waitUntil(t, "the worker is ready", func() bool { code, _ := readyz(t, addr); return code == http.StatusOK })
	if code, body := readyz(t, addr); !strings.Contains(body, name+": ok") {
		t.Errorf("ready body (%d): %q, want the queue named ok", code, body)
	}

	sw.down.Store(true)
	var body string
	waitUntil(t, "readiness fails", func() bool {
		var code int
		code, body = readyz(t, addr)
		return code == http.StatusServiceUnavailable
	})
	for _, want := range []string{name + ": not ready", "the last get failed", "connection refused"} {
		if !strings.Contains(body, want) {
			t.Errorf("503 body %q does not say %q", body, want)
		}
	}
	if strings.Contains(body, "TOPSECRET") {
		t.Errorf("503 body shows the URL's signature: %q", body)
	}
	if got := adminRequest(t, addr, "GET", admin.HealthPath, "", ""); got != http.StatusOK {
		t.Errorf("/healthz while the backend is down: %d, want 200 (the process is alive)", got)
	}
	fams := scrape(t, addr, "")
	if got := value(fams, "adaptq_queue_ready", "queue", name); got != 0 {
		t.Errorf("adaptq_queue_ready while down = %v, want 0", got)
	}
	// The meter files a failed get, which returned no message, under
	// get_empty.
	if got := value(fams, "adaptq_backend_call_errors_total", "queue", name, "kind", "get") +
		value(fams, "adaptq_backend_call_errors_total", "queue", name, "kind", "get_empty"); got < 1 {
		t.Errorf("get errors while down = %v, want some", got)
	}

	sw.down.Store(false)
	waitUntil(t, "the worker is ready again", func() bool { code, _ := readyz(t, addr); return code == http.StatusOK })
}

// Before Run and after it, the worker is not ready.
func TestReadyzBeforeAndAfterRun(t *testing.T) {
	t.Parallel()
	w := metricsWorker(t, "queues: [{url: 'memory://"+uniqueQueue("life")+"', handler: 'exec: cat'}]\n")
	if ready, lines := w.Readiness(); ready || len(lines) != 1 || lines[0] != "not running" {
		t.Errorf("before Run: %v %q", ready, lines)
	}
	stop := runWorker(t, w)
	waitUntil(t, "ready", func() bool { ready, _ := w.Readiness(); return ready })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if ready, _ := w.Readiness(); ready {
		t.Error("ready after Run returned")
	}
}

// An idle worker whose gets answer is ready however long it has been
// idle; one whose gets hang stops being ready once its last get is
// ReadyCadences poll intervals old, and is ready again when they return.
// Virtual time: the worker's clock moves only when the test moves it.
func TestReadyzInVirtualTime(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("vready")
	sw := newBackendSwitch()
	fake := clock.NewFake(time.Time{})
	w := metricsWorker(t, `
admin: {address: "127.0.0.1:0"}
queues:
  - url: 'memory://`+name+`'
    handler: 'exec: cat'
    idle: {min: 1s, max: 1m, delta: 1s}
    trigger: {enabled: true, safety_interval: 10m}
`, withClock(fake), withQueueOptions(queue.WithWrapper(sw.wrap)))
	runWorker(t, w)
	addr := w.AdminAddress()
	l, _ := w.Listener(name)
	waitUntil(t, "the first get", func() bool { return !l.Stats().LastGet.IsZero() })
	// Idle for an hour of virtual time: the task polls as its backoff says
	// and stays ready.
	for i := 0; i < 60; i++ {
		fake.Advance(time.Minute)
		waitUntil(t, "the idle task polls within its safety interval", func() bool {
			return fake.Now().Sub(l.Stats().LastGet) <= 10*time.Minute
		})
		if code, body := readyz(t, addr); code != http.StatusOK {
			t.Fatalf("idle for %d min: %d %q", i+1, code, body)
		}
	}
	if got := l.Options().SafetyInterval; readyWindow(l.Options()) != ReadyCadences*got {
		t.Fatalf("window %s, want %d × the safety interval %s", readyWindow(l.Options()), ReadyCadences, got)
	}

	// The gets hang: past the window the queue is not ready.
	sw.hang.Store(true)
	var body string
	waitUntil(t, "readiness fails after the window", func() bool {
		fake.Advance(time.Minute)
		var code int
		code, body = readyz(t, addr)
		return code == http.StatusServiceUnavailable
	})
	if since := fake.Now().Sub(l.Stats().LastGet); since <= readyWindow(l.Options()) {
		t.Errorf("not ready %s after the last get, within the window %s", since, readyWindow(l.Options()))
	}
	if !strings.Contains(body, name+": not ready: no get for") {
		t.Errorf("503 body %q does not say how long since the last get", body)
	}
	sw.hang.Store(false)
	close(sw.released)
	waitUntil(t, "ready once the get returns", func() bool { code, _ := readyz(t, addr); return code == http.StatusOK })
}

// The rule itself, at chosen moments.
func TestQueueReadyRule(t *testing.T) {
	t.Parallel()
	now := clock.Epoch.Add(time.Hour)
	plain := listener.Options{Idle: scaling.IdleBackoff{Max: time.Minute}}
	triggered := listener.Options{Idle: scaling.IdleBackoff{Max: time.Minute}, SafetyInterval: 10 * time.Minute, Notifier: &listener.LocalNotifier{}}
	fast := listener.Options{Idle: scaling.IdleBackoff{Max: time.Second}}
	boom := errors.New("boom")
	for _, tc := range []struct {
		name  string
		o     listener.Options
		st    listener.Stats
		held  int
		ready bool
		says  string
	}{
		{"no get yet", plain, listener.Stats{}, 0, false, "no get yet"},
		{"last get ok, recent", plain, listener.Stats{LastGet: now.Add(-time.Minute)}, 0, true, ""},
		{"last get ok, 3 idle.max ago", plain, listener.Stats{LastGet: now.Add(-3 * time.Minute)}, 0, true, ""},
		{"no get for longer than 3 idle.max", plain, listener.Stats{LastGet: now.Add(-3*time.Minute - time.Second)}, 0, false, "no get for 3m1s"},
		{"triggered and idle 20 min", triggered, listener.Stats{LastGet: now.Add(-20 * time.Minute)}, 0, true, ""},
		{"triggered, no get for 31 min", triggered, listener.Stats{LastGet: now.Add(-31 * time.Minute)}, 0, false, "no get for 31m"},
		{"fast poller: at least 30 s", fast, listener.Stats{LastGet: now.Add(-29 * time.Second)}, 0, true, ""},
		{"busy with held messages", plain, listener.Stats{LastGet: now.Add(-time.Hour)}, 3, true, ""},
		{"last get failed", plain, listener.Stats{LastGet: now.Add(-time.Minute), LastGetError: now.Add(-time.Second), LastGetErr: boom, LastGetFailed: true}, 3, false, "the last get failed 1s ago (boom)"},
		{"failed, then succeeded", plain, listener.Stats{LastGet: now.Add(-time.Second), LastGetError: now.Add(-time.Minute), LastGetErr: boom}, 0, true, ""},
		{"never succeeded", plain, listener.Stats{LastGetError: now.Add(-time.Second), LastGetErr: boom, LastGetFailed: true}, 0, false, "no get has succeeded yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why := queueReady(tc.o, tc.st, tc.held, now)
			if (why == "") != tc.ready || !strings.Contains(why, tc.says) {
				t.Errorf("queueReady = %q, want ready %v saying %q", why, tc.ready, tc.says)
			}
		})
	}
}

func TestRedactLine(t *testing.T) {
	t.Parallel()
	got := redactLine("azure: get \"q\": Get \"https://a.queue.core.windows.net/q?sig=abc&sv=1\":\n dial tcp: refused; redis://u:pw@h:6379/0")
	for _, secret := range []string{"sig=abc", "pw@"} {
		if strings.Contains(got, secret) {
			t.Errorf("redactLine kept %q: %q", secret, got)
		}
	}
	if strings.Contains(got, "\n") || !strings.Contains(got, "refused") {
		t.Errorf("redactLine = %q", got)
	}
}
