package adaptq

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/queue"
)

// TestLogoutEndsTheSessionOnTheServer: cookies are per host, not per port,
// so another service on the host receives the status page's cookie. After
// the operator logs out, that copy is worth nothing: the page, the stats
// and a purge with it are refused (401) on a real worker, and the poison
// queue keeps its messages.
func TestLogoutEndsTheSessionOnTheServer(t *testing.T) {
	t.Parallel()
	const token = "logout-Qm4vXn8pRt2w"
	var failing atomic.Bool
	failing.Store(true)
	w, _ := poisonWorker(t, token, &failing)
	for i := range 2 {
		if _, err := w.Put(context.Background(), "jobs", fmt.Appendf(nil, "job-%d", i), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "both messages are poisoned", func() bool { return poisonCount(t, w) == 2 })
	addr := w.AdminAddress()

	resp, _ := pageRequest(t, addr, "POST", admin.LoginPath, url.Values{"token": {token}}, nil, "Sec-Fetch-Site", "same-origin")
	c := sessionCookie(t, resp)
	resp, page := pageRequest(t, addr, "GET", admin.StatusPath, nil, c)
	m := csrfField.FindStringSubmatch(page)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("GET / with the cookie: %s, anti-forgery field %v", resp.Status, m)
	}
	csrf := m[1]
	if resp, _ := pageRequest(t, addr, "GET", admin.StatsPath, nil, c); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s with the cookie: %s", admin.StatsPath, resp.Status)
	}
	stolen := *c // what another service on the host received

	resp, _ = pageRequest(t, addr, "POST", admin.LogoutPath, url.Values{"csrf": {csrf}}, c, "Sec-Fetch-Site", "same-origin")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %s", resp.Status)
	}
	if del := resp.Cookies(); len(del) != 1 || del[0].MaxAge >= 0 {
		t.Errorf("logout's cookies %v: want the session cookie deleted", del)
	}

	purge := poisonPath(admin.PoisonPurgePath, "jobs")
	for _, tc := range []struct {
		method, path string
		form         url.Values
	}{
		{"GET", admin.StatusPath, nil},
		{"GET", admin.StatsPath, nil},
		{"POST", purge, url.Values{"all": {"true"}, "csrf": {csrf}}},
		{"POST", admin.LogoutPath, url.Values{"csrf": {csrf}}},
	} {
		resp, body := pageRequest(t, addr, tc.method, tc.path, tc.form, &stolen, "Sec-Fetch-Site", "same-origin")
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s with the cookie after logout: %s, want 401\n%.300s", tc.method, tc.path, resp.Status, body)
		}
		if strings.Contains(body, `data-queue="jobs"`) {
			t.Errorf("%s %s with the cookie after logout shows the queues", tc.method, tc.path)
		}
	}
	if n := poisonCount(t, w); n != 2 {
		t.Errorf("the poison queue holds %d messages after a purge with a logged-out cookie, want 2", n)
	}
}
