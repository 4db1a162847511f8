package admin

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/statuspage"
	"github.com/adaptq/adaptq/internal/testutil"
)

var (
	pageRequest   = testutil.PageRequest
	sessionCookie = testutil.SessionCookie
)

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
	addr := startAdmin(t, "")
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
	const token = "page-Kv9qWx2mLp7z"
	addr := startAdmin(t, token)

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
	addr := startAdmin(t, "real-Hn4tRb8yQc1e")
	_, port, _ := strings.Cut(addr, ":")
	other := statuspage.NewSessions("other-Jm5uSd3wXf6g", port, time.Now).Login()
	if resp, _ := pageRequest(t, addr, "GET", StatsPath, nil, other); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET %s with a cookie made with another token: %s", StatsPath, resp.Status)
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
	const token = "site-Pz2kVn7rGh4d"
	addr := startAdmin(t, token)
	resp, _ := pageRequest(t, addr, "POST", LoginPath, url.Values{"token": {token}}, nil, "Sec-Fetch-Site", "same-origin")
	c := sessionCookie(t, resp)
	poisonMsg := strings.NewReplacer("{name}", "admin-q", "{id}", "nope").Replace(PoisonMessagePath)
	for _, tc := range []struct {
		path, site string
		want       int
	}{
		// Refused before the session is read (refuseCrossSite).
		{StatsPath, "same-site", http.StatusForbidden},
		{poisonMsg, "same-site", http.StatusForbidden},
		{StatusPath, "same-site", http.StatusForbidden}, // the login form
		{StatsPath, "cross-site", http.StatusForbidden},
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
	addr := startAdmin(t, "probe-Yb6cTq9mNw3s")
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
		resp, body := testutil.Send(t, addr, "GET", path, nil)
		if got := resp.StatusCode != http.StatusUnauthorized; got != open {
			t.Errorf("GET %s without the token: %s, want open=%v\n%.200s", path, resp.Status, open, body)
		}
	}
}
