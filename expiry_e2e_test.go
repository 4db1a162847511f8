package adaptq

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
)

// A downstream in maintenance answers 503 with Retry-After: 604800 (7
// days). An http: handler passes the hint on, and honouring it would hide
// the message past its time-to-live: never delivered, processed or
// poisoned. End to end, on a real SQLite queue: the message ends in the
// poison queue with the reason, not lost.
func TestRetryAfterLongerThanTheTTLEndsInThePoisonQueue(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.Header().Set("Retry-After", "604800")
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	}))
	t.Cleanup(down.Close)
	dir := t.TempDir()
	cfg := testConfig(t, `
admin: {address: ""}
queues:
  - name: billing
    url: sqlite://`+dir+`/q.db?queue=billing
    handler: "http: `+down.URL+`/hook?token=abc"
    idle: {max: 100ms}
`)
	w, err := New(cfg, WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	stop := runWorker(t, w)
	id, err := w.Put(context.Background(), "billing", []byte(`{"invoice":7}`), queue.PutOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := w.Listener("billing")
	waitUntil(t, "the failure is settled", func() bool { s := l.Stats(); return s.Poisoned+s.Hidden > 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Poisoned != 1 || s.Hidden != 0 {
		t.Fatalf("stats %+v: want the message poisoned, not hidden for 7 days past its 1-minute life", s)
	}
	pq, err := queue.Open(context.Background(), "sqlite://"+dir+"/q.db?queue=billing-poison")
	if err != nil {
		t.Fatal(err)
	}
	defer pq.Close()
	ms, err := pq.Peek(context.Background(), 32)
	if err != nil || len(ms) != 1 {
		t.Fatalf("the poison queue holds %d (%v), want the message", len(ms), err)
	}
	pm := poison.Decode(ms[0])
	if pm.ID != id || string(pm.Body) != `{"invoice":7}` || pm.Rule != poison.RuleExpiring ||
		!strings.Contains(pm.Reason, "503 Service Unavailable") || !strings.Contains(pm.Reason, "Retry-After") ||
		strings.Contains(pm.Reason, "token=abc") {
		t.Fatalf("poisoned %+v: want the body, rule %s, the status and why, the URL's token redacted", pm, poison.RuleExpiring)
	}
	if calls.Load() != 1 {
		t.Errorf("the downstream was called %d times", calls.Load())
	}
}
