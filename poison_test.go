package adaptq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
)

// poisonWorker runs a worker on an embedded queue "jobs" whose handler
// fails permanently while *failing is set, with an admin endpoint (token
// if not empty). It returns the worker and a counter of successful runs.
func poisonWorker(t *testing.T, token string, failing *atomic.Bool) (*Worker, *atomic.Int64) {
	t.Helper()
	cfg := testConfig(t, `
admin: {address: "127.0.0.1:0", token: "`+token+`"}
queues:
  - url: sqlite://$DIR/p.db?queue=jobs
    idle: {max: 100ms}
`)
	w, err := New(cfg, WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	var ok atomic.Int64
	w.MustHandle("jobs", func(_ context.Context, m *queue.Message) error {
		if failing.Load() {
			return handler.Permanent(fmt.Errorf("downstream refused %s", m.Body))
		}
		ok.Add(1)
		return nil
	})
	runWorker(t, w)
	return w, &ok
}

// adminCall sends method path (with body) to the worker's admin endpoint
// and returns the status and the response body.
func adminCall(t *testing.T, w *Worker, method, path, body string, headers ...string) (int, []byte) {
	t.Helper()
	resp, b := adminSend(t, w.AdminAddress(), method, path, strings.NewReader(body), headers...)
	return resp.StatusCode, b
}

func poisonPath(p, queueName string) string { return strings.Replace(p, "{name}", queueName, 1) }

// poisonCount is how many messages the worker's poison listing shows.
func poisonCount(t *testing.T, w *Worker) int {
	t.Helper()
	p, err := w.PoisonList(context.Background(), "jobs", "", poison.MaxLimit)
	if err != nil {
		t.Fatal(err)
	}
	return len(p.Messages)
}

func TestPoisonToolsThroughTheAdminEndpoint(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	failing.Store(true)
	w, ok := poisonWorker(t, "", &failing)
	ctx := context.Background()
	const n = 40 // more than one peek shows
	ids := map[string]bool{}
	for i := range n {
		id, err := w.Put(ctx, "jobs", fmt.Appendf(nil, "job-%d", i), queue.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	waitUntil(t, "every message is poisoned", func() bool { return poisonCount(t, w) == n })

	// The listing, paged over HTTP: each message once, with the original's
	// id, dequeue count and failure.
	seen := map[string]string{} // original id → poison id
	after := ""
	for pages := 0; ; pages++ {
		q := url.Values{"limit": {"15"}}
		if after != "" {
			q.Set("after", after)
		}
		code, b := adminCall(t, w, "GET", poisonPath(admin.PoisonPath, "jobs")+"?"+q.Encode(), "")
		if code != http.StatusOK {
			t.Fatalf("list: %d %s", code, b)
		}
		var p admin.PoisonPage
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		if p.Queue != "jobs" || p.PoisonQueue != "jobs"+PoisonSuffix {
			t.Errorf("page of queue %q, poison queue %q", p.Queue, p.PoisonQueue)
		}
		for _, m := range p.Messages {
			if !ids[m.ID] || seen[m.ID] != "" || m.DequeueCount != 1 || m.Rule != poison.RulePermanent ||
				!strings.HasPrefix(m.Reason, "downstream refused job-") || m.FailedAt.IsZero() || m.Queue != "jobs" {
				t.Errorf("listed %+v: want a new original id, dequeue count 1 and the handler's error", m)
			}
			seen[m.ID] = m.PoisonID
		}
		if after = p.Next; after == "" || pages > n {
			break
		}
	}
	if len(seen) != n {
		t.Fatalf("the listing showed %d of %d", len(seen), n)
	}
	if peeked, err := w.PoisonPeek(ctx, "jobs", 5); err != nil || len(peeked) != 5 || !ids[peeked[0].ID] {
		t.Errorf("PoisonPeek: %d, %v", len(peeked), err)
	}
	var one, pid string
	for one, pid = range seen {
		break
	}
	code, b := adminCall(t, w, "GET", poisonPath(admin.PoisonPath, "jobs")+"/"+pid, "")
	var m poison.Message
	if err := json.Unmarshal(b, &m); code != http.StatusOK || err != nil || m.ID != one || !strings.HasPrefix(string(m.Body), "job-") {
		t.Fatalf("show %s: %d %s", pid, code, b)
	}
	if code, _ := adminCall(t, w, "GET", poisonPath(admin.PoisonPath, "jobs")+"/nope", ""); code != http.StatusNotFound {
		t.Errorf("show of an unknown id: %d", code)
	}
	if code, _ := adminCall(t, w, "GET", poisonPath(admin.PoisonPath, "nope"), ""); code != http.StatusNotFound {
		t.Errorf("list of an unknown queue: %d", code)
	}

	// A page on another site cannot requeue or purge.
	requeue := poisonPath(admin.PoisonRequeuePath, "jobs")
	for _, path := range []string{requeue, poisonPath(admin.PoisonPurgePath, "jobs")} {
		if code, _ := adminCall(t, w, "POST", path, "all=true", "Content-Type", "application/x-www-form-urlencoded",
			"Origin", "http://attacker.example"); code != http.StatusForbidden {
			t.Errorf("cross-origin POST %s: %d, want 403", path, code)
		}
	}
	if got := poisonCount(t, w); got != n {
		t.Fatalf("after refused posts the poison queue holds %d, want %d", got, n)
	}
	if code, b := adminCall(t, w, "POST", requeue, "", "Content-Type", "application/x-www-form-urlencoded"); code != http.StatusBadRequest {
		t.Errorf("requeue with no ids: %d %s", code, b)
	}

	// The handler is fixed: requeue one by id (a form, as the status
	// page's button sends), then the rest (JSON).
	failing.Store(false)
	code, b = adminCall(t, w, "POST", requeue, "ids="+url.QueryEscape(pid), "Content-Type", "application/x-www-form-urlencoded")
	var res poison.Result
	if err := json.Unmarshal(b, &res); code != http.StatusOK || err != nil || len(res.Done) != 1 || res.Done[0].ID != one || res.Done[0].NewID == "" {
		t.Fatalf("requeue by id: %d %s", code, b)
	}
	waitUntil(t, "the requeued message is handled", func() bool { return ok.Load() == 1 })
	code, b = adminCall(t, w, "POST", requeue, `{"all": true}`, "Content-Type", "application/json")
	if err := json.Unmarshal(b, &res); code != http.StatusOK || err != nil || len(res.Done) != n-1 {
		t.Fatalf("requeue all: %d %s", code, b)
	}
	waitUntil(t, "every requeued message is handled", func() bool { return ok.Load() == n })
	if got := poisonCount(t, w); got != 0 {
		t.Errorf("the poison queue holds %d after requeue all", got)
	}

	// Purge: by id, then all.
	failing.Store(true)
	for i := range 3 {
		if _, err := w.Put(ctx, "jobs", fmt.Appendf(nil, "again-%d", i), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "three more are poisoned", func() bool { return poisonCount(t, w) == 3 })
	p, _ := w.PoisonList(ctx, "jobs", "", 0)
	purge := poisonPath(admin.PoisonPurgePath, "jobs")
	if code, b := adminCall(t, w, "POST", purge, `{"ids": ["`+p.Messages[0].PoisonID+`"]}`, "Content-Type", "application/json"); code != http.StatusOK || poisonCount(t, w) != 2 {
		t.Fatalf("purge by id: %d %s, %d left", code, b, poisonCount(t, w))
	}
	if code, b := adminCall(t, w, "POST", purge, "all=true", "Content-Type", "application/x-www-form-urlencoded"); code != http.StatusOK || poisonCount(t, w) != 0 {
		t.Fatalf("purge all: %d %s, %d left", code, b, poisonCount(t, w))
	}
	if got := ok.Load(); got != n {
		t.Errorf("purged messages ran: %d successes, want %d", got, n)
	}
}

func TestPoisonRoutesNeedTheToken(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	w, _ := poisonWorker(t, "poison-Rw5jHc1zBn", &failing)
	list, purge := poisonPath(admin.PoisonPath, "jobs"), poisonPath(admin.PoisonPurgePath, "jobs")
	if code, _ := adminCall(t, w, "GET", list, ""); code != http.StatusUnauthorized {
		t.Errorf("list without the token: %d", code)
	}
	if code, _ := adminCall(t, w, "POST", purge, "all=true", "Content-Type", "application/x-www-form-urlencoded"); code != http.StatusUnauthorized {
		t.Errorf("purge without the token: %d", code)
	}
	if code, b := adminCall(t, w, "GET", list, "", "Authorization", "Bearer poison-Rw5jHc1zBn"); code != http.StatusOK {
		t.Errorf("list with the token: %d %s", code, b)
	}
	if code, b := adminCall(t, w, "POST", purge, "all=true", "Content-Type", "application/x-www-form-urlencoded", "Authorization", "Bearer poison-Rw5jHc1zBn"); code != http.StatusOK {
		t.Errorf("purge with the token: %d %s", code, b)
	}
}

func TestPoisonMethodsNeedARunningWorker(t *testing.T) {
	t.Parallel()
	w, err := New(testConfig(t, `queues: [{url: 'memory://idle-q', handler: 'exec: cat'}]`), WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.PoisonList(context.Background(), "idle-q", "", 0); !errors.Is(err, ErrNotRunning) {
		t.Errorf("PoisonList before Run: %v", err)
	}
}
