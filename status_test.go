package adaptq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/internal/statuspage"
	"github.com/adaptq/adaptq/queue"
)

// pageRequest sends method path to the worker at addr with a form body (if
// form is not nil) and the cookie and extra headers given, without
// following redirects; it returns the response and its body.
func pageRequest(t *testing.T, addr, method, path string, form url.Values, cookie *http.Cookie, headers ...string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
		headers = append(headers, "Content-Type", "application/x-www-form-urlencoded")
	}
	if cookie != nil {
		headers = append(headers, "Cookie", (&http.Cookie{Name: cookie.Name, Value: cookie.Value}).String())
	}
	resp, b := adminSend(t, addr, method, path, body, headers...)
	return resp, string(b)
}

// sessionCookie returns the cookie a response sets, failing the test if it
// sets none.
func sessionCookie(t *testing.T, resp *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range resp.Cookies() {
		if strings.HasPrefix(c.Name, "adaptq_admin_") {
			return c
		}
	}
	t.Fatalf("%s: no session cookie in %q", resp.Status, resp.Header.Values("Set-Cookie"))
	return nil
}

// postCase is a POST to a page route and the status it must get.
type postCase struct {
	name    string
	form    url.Values
	cookie  *http.Cookie
	headers []string
	want    int
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func TestStatusPageWithoutAToken(t *testing.T) {
	t.Parallel()
	addr := adminWorker(t, "")
	resp, body := pageRequest(t, addr, "GET", StatusPath, nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /: %s\n%s", resp.Status, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("Content-Type %q", ct)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q lets the page load outside resources", csp)
	}
	if !strings.Contains(body, `data-queue="admin-q"`) {
		t.Errorf("the page has no row for admin-q:\n%s", body)
	}
	if strings.Contains(body, "<script") || strings.Contains(body, "src=") || strings.Contains(body, `rel="stylesheet"`) {
		t.Errorf("the page loads a script or an outside resource:\n%s", body)
	}
	// No token, no login: nothing to log in to, and no anti-forgery field.
	if resp, _ := pageRequest(t, addr, "POST", LoginPath, url.Values{"token": {"x"}}, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST %s without a token configured: %s", LoginPath, resp.Status)
	}
	// Without a token the requeue button has the cross-origin check.
	requeue := strings.Replace(StatusRequeuePath, "{name}", "admin-q", 1)
	if resp, _ := pageRequest(t, addr, "POST", requeue, url.Values{"all": {"1"}}, nil, "Origin", "http://attacker.example", "Sec-Fetch-Site", "cross-site"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin requeue without a token: %s, want 403", resp.Status)
	}
	if resp, _ := pageRequest(t, addr, "POST", requeue, url.Values{"all": {"1"}}, nil, "Sec-Fetch-Site", "same-origin"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("same-origin requeue of an empty poison queue without a token: %s, want 303", resp.Status)
	}
	// The notice after a requeue names only a queue the worker runs.
	if _, body := pageRequest(t, addr, "GET", StatusPath+"?queue=elsewhere&requeued=7", nil, nil); strings.Contains(body, `id="notice"`) {
		t.Errorf("the page shows a notice about a queue it does not run")
	}
	if _, body := pageRequest(t, addr, "GET", StatusPath+"?queue=admin-q&requeued=2&failed=1", nil, nil); !strings.Contains(body, "Requeued 2 messages of admin-q. 1 failed") {
		t.Errorf("the page shows no notice after a requeue:\n%s", body)
	}
	// Other paths are not the page.
	if resp, _ := pageRequest(t, addr, "GET", "/nope", nil, nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nope: %s", resp.Status)
	}
}

func TestStatusPageLoginWithAToken(t *testing.T) {
	t.Parallel()
	const token = "page-s3cret-token"
	addr := adminWorker(t, token)

	// Without the token or a cookie: the login form, and nothing else.
	resp, body := pageRequest(t, addr, "GET", StatusPath, nil, nil)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `name="token"`) {
		t.Fatalf("GET / without a session: %s, want 401 with the login form\n%s", resp.Status, body)
	}
	if strings.Contains(body, "admin-q") {
		t.Errorf("the login form shows the queues")
	}
	if resp, _ := pageRequest(t, addr, "GET", StatsPath, nil, nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET %s without a session: %s", StatsPath, resp.Status)
	}

	resp, body = pageRequest(t, addr, "POST", LoginPath, url.Values{"token": {"wrong"}}, nil)
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Fatalf("login with a wrong token: %s, cookies %v", resp.Status, resp.Cookies())
	}
	// A cross-site page cannot log a browser in (login CSRF).
	if resp, _ := pageRequest(t, addr, "POST", LoginPath, url.Values{"token": {token}}, nil, "Sec-Fetch-Site", "cross-site"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site login: %s, want 403", resp.Status)
	}

	resp, _ = pageRequest(t, addr, "POST", LoginPath, url.Values{"token": {token}}, nil, "Sec-Fetch-Site", "same-origin")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != StatusPath {
		t.Fatalf("login: %s to %q, want 303 to /", resp.Status, resp.Header.Get("Location"))
	}
	c := sessionCookie(t, resp)
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.MaxAge <= 0 {
		t.Errorf("session cookie %s: want HttpOnly, SameSite=Strict, Path=/ and a Max-Age", c)
	}
	if strings.Contains(c.Value, token) {
		t.Fatalf("the cookie holds the token: %s", c)
	}

	resp, body = pageRequest(t, addr, "GET", StatusPath, nil, c)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `data-queue="admin-q"`) {
		t.Fatalf("GET / with the cookie: %s\n%s", resp.Status, body)
	}
	if strings.Contains(body, token) {
		t.Fatal("the page shows the token")
	}
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("the logged-in page has no anti-forgery field:\n%s", body)
	}
	csrf := m[1]
	if resp, _ := pageRequest(t, addr, "GET", StatsPath, nil, c); resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s with the cookie: %s", StatsPath, resp.Status)
	}

	// A state-changing request with the cookie needs the page's
	// anti-forgery token and the same origin.
	for _, tc := range []postCase{
		{"no cookie", url.Values{"csrf": {csrf}}, nil, nil, http.StatusUnauthorized},
		{"forged cookie", url.Values{"csrf": {csrf}}, &http.Cookie{Name: c.Name, Value: "99999999999.forged"}, nil, http.StatusUnauthorized},
		{"cookie, no anti-forgery token", url.Values{}, c, nil, http.StatusForbidden},
		{"cookie, wrong anti-forgery token", url.Values{"csrf": {csrf + "x"}}, c, nil, http.StatusForbidden},
		{"cross-origin", url.Values{"csrf": {csrf}}, c, []string{"Origin", "http://attacker.example", "Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"same origin, cookie and token", url.Values{"csrf": {csrf}}, c, []string{"Origin", "http://" + addr, "Sec-Fetch-Site", "same-origin"}, http.StatusSeeOther},
	} {
		resp, body := pageRequest(t, addr, "POST", LogoutPath, tc.form, tc.cookie, tc.headers...)
		if resp.StatusCode != tc.want {
			t.Errorf("%s: POST %s: %s, want %d\n%s", tc.name, LogoutPath, resp.Status, tc.want, body)
		}
	}
}

func TestStatusPageCookieOfAnotherToken(t *testing.T) {
	t.Parallel()
	addr := adminWorker(t, "the-real-token")
	_, port, _ := strings.Cut(addr, ":")
	other := statuspage.NewSessions("another-token", port, time.Now).Login()
	if resp, _ := pageRequest(t, addr, "GET", StatsPath, nil, other); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET %s with a cookie made with another token: %s", StatsPath, resp.Status)
	}
}

// cell returns the text of the cell of class class in the page's row of
// queue name (markup stripped).
func cell(t *testing.T, page, name, class string) string {
	t.Helper()
	row := regexp.MustCompile(`(?s)<tr data-queue="` + regexp.QuoteMeta(name) + `">(.*?)</tr>`).FindStringSubmatch(page)
	if row == nil {
		t.Fatalf("no row for %s in the page:\n%s", name, page)
	}
	c := regexp.MustCompile(`(?s)<td class="n ` + class + `">(.*?)</td>`).FindStringSubmatch(row[1])
	if c == nil {
		t.Fatalf("no %s cell in the row of %s:\n%s", class, name, row[1])
	}
	return strings.TrimSpace(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(c[1], ""))
}

// The page's windowed figures, in virtual time: after a drain the rate and
// the pickup latency show, the monthly cost not while the worker has run
// less than a minute (nothing is extrapolated from seconds); later it does.
func TestStatusPageFigures(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("page-figures")
	const messages = 20
	cfg := testConfig(t, `
admin: {address: "127.0.0.1:0"}
queues: [{url: 'memory://`+name+`', handler: work}]
`)
	putN(t, "memory://"+name, messages)
	fake := clock.NewFake(time.Now())
	w, err := New(cfg, WithLogger(zap.NewNop()), withClock(fake))
	if err != nil {
		t.Fatal(err)
	}
	w.MustHandle("work", func(context.Context, *queue.Message) error { return nil })
	runWorker(t, w)
	l, _ := w.Listener(name)
	waitUntil(t, "the worker drains the queue", func() bool {
		if l.Stats().Deleted == messages {
			return true
		}
		fake.Advance(10 * time.Millisecond)
		return false
	})
	fake.Advance(time.Second) // a rate needs time to be over
	addr := w.AdminAddress()
	_, page := pageRequest(t, addr, "GET", StatusPath, nil, nil)
	if got := cell(t, page, name, "processed"); got != fmt.Sprint(messages) {
		t.Errorf("processed %q, want %d", got, messages)
	}
	for _, class := range []string{"rate", "pickup", "calls"} {
		if got := cell(t, page, name, class); got == "n/a" || got == "—" || got == "0/s" {
			t.Errorf("%s is %q after a drain of %d messages", class, got, messages)
		}
	}
	if got := cell(t, page, name, "cost"); got != "n/a" {
		t.Errorf("the monthly cost is %q before the worker has run a minute (extrapolated from seconds)", got)
	}

	fake.Advance(2 * time.Minute)
	_, page = pageRequest(t, addr, "GET", StatusPath, nil, nil)
	if got := cell(t, page, name, "cost"); !strings.HasPrefix(got, "$") {
		t.Errorf("the monthly cost is %q after two minutes", got)
	}
}

// The page's requeue button, over HTTP: refused without the token or a
// session (401), with a session but not its anti-forgery token (403), from
// another origin (403); with the session and its token it puts the message
// back on its queue and takes it off the poison queue.
func TestStatusPageRequeueNeedsTheSessionAndItsToken(t *testing.T) {
	t.Parallel()
	const token = "requeue-s3cret"
	name := uniqueQueue("page-requeue")
	cfg := testConfig(t, `
admin: {address: "127.0.0.1:0", token: "`+token+`"}
queues: [{url: 'memory://`+name+`', handler: once, trigger: {enabled: true}}]
`)
	w, err := New(cfg, WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	w.MustHandle("once", func(context.Context, *queue.Message) error {
		if runs.Add(1) == 1 {
			return handler.Permanent(errors.New("the first run fails"))
		}
		return nil
	})
	runWorker(t, w)
	ctx := context.Background()
	if _, err := w.Put(ctx, name, []byte("again"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var pid string
	waitUntil(t, "the message is poisoned", func() bool {
		ms, err := w.PoisonPeek(ctx, name, 32)
		if err != nil || len(ms) != 1 {
			return false
		}
		pid = ms[0].PoisonID
		return true
	})
	addr := w.AdminAddress()
	resp, _ := pageRequest(t, addr, "POST", LoginPath, url.Values{"token": {token}}, nil)
	c := sessionCookie(t, resp)
	_, page := pageRequest(t, addr, "GET", StatusPath, nil, c)
	m := csrfField.FindStringSubmatch(page)
	if m == nil || !strings.Contains(page, `data-id="`+pid+`"`) {
		t.Fatalf("the page has no anti-forgery field or no row for poison message %s:\n%s", pid, page)
	}
	csrf := m[1]
	path := strings.Replace(StatusRequeuePath, "{name}", name, 1)
	for _, tc := range []postCase{
		{"no token, no cookie", url.Values{"id": {pid}, "csrf": {csrf}}, nil, nil, http.StatusUnauthorized},
		{"cookie without the anti-forgery token", url.Values{"id": {pid}}, c, nil, http.StatusForbidden},
		{"cross-origin, with cookie and token", url.Values{"id": {pid}, "csrf": {csrf}}, c, []string{"Origin", "http://attacker.example", "Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
	} {
		if resp, body := pageRequest(t, addr, "POST", path, tc.form, tc.cookie, tc.headers...); resp.StatusCode != tc.want {
			t.Errorf("%s: %s, want %d\n%s", tc.name, resp.Status, tc.want, body)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("a refused requeue ran the message: %d runs", runs.Load())
	}
	resp, body := pageRequest(t, addr, "POST", path, url.Values{"id": {pid}, "csrf": {csrf}}, c, "Origin", "http://"+addr, "Sec-Fetch-Site", "same-origin")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("requeue with the session and its token: %s\n%s", resp.Status, body)
	}
	waitUntil(t, "the requeued message runs again on its queue", func() bool { return runs.Load() == 2 })
	if ms, err := w.PoisonPeek(ctx, name, 32); err != nil || len(ms) != 0 {
		t.Errorf("the poison queue after the requeue: %d messages, %v", len(ms), err)
	}
	_, page = pageRequest(t, addr, "GET", resp.Header.Get("Location"), nil, c)
	if !strings.Contains(page, "Requeued 1 message of "+name+".") || !strings.Contains(page, "No poisoned messages.") {
		t.Errorf("the page after the requeue:\n%s", page)
	}
	// An id that is not there: nothing requeued, said so.
	resp, _ = pageRequest(t, addr, "POST", path, url.Values{"id": {pid}, "csrf": {csrf}}, c)
	_, page = pageRequest(t, addr, "GET", resp.Header.Get("Location"), nil, c)
	if !strings.Contains(page, "Requeued 0 messages of "+name+". 1 was not in the poison queue") {
		t.Errorf("the page after requeuing a message that is gone:\n%s", page)
	}
}

// TestStatusPageSessionRefusesOtherOriginsOfTheSite: SameSite=Strict keeps
// the cookie from other sites, not from other origins of the same site: a
// page on another port of the host, or on a sibling subdomain, makes the
// browser send it. Such a page must not drive the endpoint's GETs with the
// session (each costs billed calls; a poison lookup scans and hides the
// poison queue), while the operator's own navigations still work.
func TestStatusPageSessionRefusesOtherOriginsOfTheSite(t *testing.T) {
	t.Parallel()
	const token = "same-site-token"
	addr := adminWorker(t, token)
	resp, _ := pageRequest(t, addr, "POST", LoginPath, url.Values{"token": {token}}, nil, "Sec-Fetch-Site", "same-origin")
	c := sessionCookie(t, resp)
	poisonMsg := strings.NewReplacer("{name}", "admin-q", "{id}", "nope").Replace(PoisonMessagePath)
	for _, tc := range []struct {
		path, site string
		want       int
	}{
		{StatsPath, "same-site", http.StatusUnauthorized},
		{poisonMsg, "same-site", http.StatusUnauthorized},
		{StatusPath, "same-site", http.StatusUnauthorized}, // the login form
		{StatsPath, "cross-site", http.StatusUnauthorized},
		{StatsPath, "same-origin", http.StatusOK},
		{StatusPath, "none", http.StatusOK}, // typed or bookmarked
		{StatusPath, "", http.StatusOK},     // not a browser that says
	} {
		var h []string
		if tc.site != "" {
			h = []string{"Sec-Fetch-Site", tc.site}
		}
		if resp, body := pageRequest(t, addr, "GET", tc.path, nil, c, h...); resp.StatusCode != tc.want {
			t.Errorf("GET %s with the cookie, Sec-Fetch-Site %q: %s, want %d\n%.200s", tc.path, tc.site, resp.Status, tc.want, body)
		}
	}
}

// TestAdminProbeExemptionIsExactPaths: the probes are open without the
// token, and no spelling of another path reaches a closed route through
// that exemption.
func TestAdminProbeExemptionIsExactPaths(t *testing.T) {
	t.Parallel()
	addr := adminWorker(t, "probe-exemption-token")
	for path, open := range map[string]bool{
		HealthPath:                       true,
		ReadyPath:                        true,
		"/%72eadyz":                      true, // an escape of /readyz is /readyz
		"/" + ReadyPath:                  false,
		ReadyPath + "/":                  false,
		ReadyPath + "/.." + StatsPath:    false,
		"/readyz%2F..%2Fv1%2Fstats":      false,
		StatsPath + "/../.." + ReadyPath: false,
		"/." + StatsPath:                 false,
	} {
		// Open: answered by the probe (readiness may say 503), not 401.
		resp, body := adminSend(t, addr, "GET", path, nil)
		if got := resp.StatusCode != http.StatusUnauthorized; got != open {
			t.Errorf("GET %s without the token: %s, want open=%v\n%.200s", path, resp.Status, open, body)
		}
	}
}
