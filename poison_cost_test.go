package adaptq

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/queue"
)

// jobsCalls reads the jobs queue's backend calls by kind from GET
// /v1/stats (its poison queue shares its meter).
func jobsCalls(t *testing.T, w *Worker) map[string]int64 {
	t.Helper()
	code, b := adminCall(t, w, "GET", admin.StatsPath, "")
	var st admin.Stats
	if err := json.Unmarshal(b, &st); code != http.StatusOK || err != nil {
		t.Fatalf("stats: %d %v", code, err)
	}
	for _, q := range st.Queues {
		if q.Name == "jobs" {
			return q.Calls
		}
	}
	t.Fatal("no jobs in the stats")
	return nil
}

// Issue 26, item 3, over HTTP against a running worker: a listing of 10
// from a poison queue of 1,000 scanned all 1,000 (33 gets, 1,000
// visibility updates, every poison copy's dequeue count raised by one).
// Now it peeks: calls bounded by the page, nothing got or hidden.
func TestPoisonListingOverHTTPCostsThePageNotTheQueue(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	w, _ := poisonWorker(t, "", &failing)
	ctx := context.Background()
	pq, err := w.PoisonQueue("jobs")
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	for i := range n {
		if _, err := pq.Put(ctx, fmt.Appendf(nil, "old poison %d", i), queue.PutOptions{TTL: queue.NoExpiry}); err != nil {
			t.Fatal(err)
		}
	}
	before := jobsCalls(t, w)
	var p admin.PoisonPage
	for i := range 10 {
		path := poisonPath(admin.PoisonPath, "jobs") + "?limit=10"
		if p.Next != "" {
			path += "&after=" + p.Next
		}
		code, b := adminCall(t, w, "GET", path, "")
		if err := json.Unmarshal(b, &p); code != http.StatusOK || err != nil || len(p.Messages) != 10 || p.Next == "" {
			t.Fatalf("page %d: %d %.300s", i, code, b)
		}
	}
	after := jobsCalls(t, w)
	peeks, gets, updates := after["peek"]-before["peek"], after["get"]-before["get"], after["update"]-before["update"]
	if peeks > 10 || gets != 0 || updates != 0 {
		t.Errorf("10 pages of 10 from %d poison messages: %d peeks, %d gets with messages, %d visibility updates; want at most 10 peeks and nothing else", n, peeks, gets, updates)
	}
	ms, err := pq.Peek(ctx, pq.Features().MaxPeek)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.DequeueCount != 0 {
			t.Fatalf("poison message %s: dequeue count %d after listings, want 0", m.ID, m.DequeueCount)
		}
	}
}

// Issue 26, item 3: without a token, a web page's <img> pointing at the
// poison listing was served. A browser's cross-site or same-site request
// now gets a 403 before any backend call.
func TestCrossSiteListingIsRefusedBeforeAnyBackendCall(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	w, _ := poisonWorker(t, "", &failing)
	pq, err := w.PoisonQueue("jobs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pq.Put(context.Background(), []byte("old poison"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	before := jobsCalls(t, w)
	path := poisonPath(admin.PoisonPath, "jobs") + "?limit=10"
	for _, site := range []string{"cross-site", "same-site"} {
		if code, b := adminCall(t, w, "GET", path, "", "Sec-Fetch-Site", site, "Sec-Fetch-Dest", "image"); code != http.StatusForbidden {
			t.Errorf("GET %s with Sec-Fetch-Site %s: %d %.200s, want 403", path, site, code, b)
		}
	}
	after := jobsCalls(t, w)
	if d := after["peek"] - before["peek"] + after["get"] - before["get"] + after["update"] - before["update"]; d != 0 {
		t.Errorf("refused requests cost %d backend calls", d)
	}
	if code, _ := adminCall(t, w, "GET", path, "", "Sec-Fetch-Site", "same-origin"); code != http.StatusOK {
		t.Errorf("GET %s from the status page's own origin: %d, want 200", path, code)
	}
}
