package statuspage

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// A session lives on the server: its cookie is a random id that only the
// Sessions that issued it accept, until it expires or is logged out.
func TestSessionsLiveOnTheServer(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 20, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	s := NewSessions("tok-1", "8089", clock)
	c := s.Login()
	if c.Name != "adaptq_admin_8089" || strings.Contains(c.Value, "tok-1") || len(c.Value) < 43 {
		t.Fatalf("cookie %s: want the port in its name and a random id of 256 bits", c)
	}
	req := func(cs ...*http.Cookie) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		for _, c := range cs {
			r.AddCookie(c)
		}
		return r
	}
	sess := s.Session(req(c))
	if sess == "" {
		t.Fatal("a fresh cookie is not a session")
	}
	if o := NewSessions("tok-1", "8089", clock); o.Session(req(c)) != "" {
		t.Error("another process's sessions (the same token) accept the cookie")
	}
	if o := NewSessions("tok-1", "9000", clock); o.Session(req(c)) != "" {
		t.Error("the cookie of another port's endpoint is a session")
	}
	tampered := *c
	tampered.Value = c.Value[:len(c.Value)-1] + "A"
	if tampered.Value == c.Value {
		tampered.Value = c.Value[:len(c.Value)-1] + "B"
	}
	if s.Session(req(&tampered)) != "" {
		t.Error("a changed id is a session")
	}

	// The anti-forgery token belongs to the session.
	post := func(csrf string) *http.Request {
		r := httptest.NewRequest("POST", "/", strings.NewReader(url.Values{CSRFField: {csrf}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return r
	}
	if !s.CheckCSRF(post(s.CSRF(sess)), sess) {
		t.Error("the session's own anti-forgery token is refused")
	}
	other := s.Login()
	if s.CheckCSRF(post(s.CSRF(other.Value)), sess) || s.CheckCSRF(post(""), sess) {
		t.Error("another session's or an empty anti-forgery token is accepted")
	}
	h := httptest.NewRequest("POST", "/", nil)
	h.Header.Set(CSRFHeader, s.CSRF(sess))
	if !s.CheckCSRF(h, sess) {
		t.Error("the anti-forgery token in its header is refused")
	}

	// Logout ends the session on the server; the other one lives on.
	if del := s.Logout(req(&tampered, c)); del.MaxAge >= 0 || del.Value != "" {
		t.Errorf("logout's cookie %s does not delete the browser's", del)
	}
	if s.Session(req(c)) != "" || s.CSRF(sess) != "" {
		t.Error("a logged-out cookie is still a session")
	}
	if s.Session(req(other)) == "" {
		t.Error("logging one session out ended another")
	}

	now = now.Add(SessionTTL - time.Second)
	if s.Session(req(other)) == "" {
		t.Error("the session expired before SessionTTL")
	}
	now = now.Add(time.Second)
	if s.Session(req(other)) != "" || s.Len() != 0 {
		t.Error("the session lives after SessionTTL")
	}
}

// The sessions kept are bounded: a login beyond MaxSessions ends the one
// that expires first.
func TestSessionsAreBounded(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 20, 0, 0, 0, time.UTC)
	s := NewSessions("tok-1", "8089", func() time.Time { return now })
	first := s.Login()
	for range MaxSessions {
		now = now.Add(time.Millisecond)
		s.Login()
	}
	if n := s.Len(); n != MaxSessions {
		t.Errorf("%d sessions after %d logins, want %d", n, MaxSessions+1, MaxSessions)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.AddCookie(first)
	if s.Session(r) != "" {
		t.Error("the oldest session outlived the bound")
	}
}

func TestPreviewIsBoundedAndPrintable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"hello", 10, "hello"},
		{"line1\nline2\ttab", 40, "line1 line2 tab"},
		{"a\x00b\x1b[31mc", 40, "a\uFFFDb\uFFFD[31mc"},
		{"\xff\xfeok", 40, "\uFFFD\uFFFDok"},
		{"0123456789", 4, "0123…"},
		{"ééé", 5, "éé…"}, // never half a rune
	} {
		got := Preview([]byte(tc.in), tc.max)
		if got != tc.want {
			t.Errorf("Preview(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
		if !utf8.ValidString(got) {
			t.Errorf("Preview(%q) is not UTF-8", tc.in)
		}
	}
}

func TestRenderEscapesWhatItShows(t *testing.T) {
	t.Parallel()
	const evil = `<script>alert(1)</script>"'&`
	v := View{
		Generated: time.Now(), CSRF: `x"><script>`,
		Notice: evil,
		Queues: []Queue{{
			Name: "q</td><script>", DepthError: evil,
			Rate: Figure{Text: "1.0/s"}, PickupLatency: Figure{Missing: evil}, MonthlyCost: Figure{Text: "$1.00"},
			Poison: Poison{Name: "q-poison", Messages: []PoisonMessage{{
				PoisonID: `pid"><img src=x>`, ID: `id"><img src=x>`, DequeueCount: 5, Rule: "<b>permanent</b>", Reason: evil + strings.Repeat("r", 2*ReasonBytes),
				FailedAt: time.Now().Add(-time.Minute), Body: []byte(evil + strings.Repeat("b", 2*PreviewBytes)),
			}}},
		}},
	}
	var b bytes.Buffer
	if err := Render(&b, v); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, bad := range []string{"<script", "<img", "<b>", `x">`, `id">`} {
		if strings.Contains(page, bad) {
			t.Errorf("the page contains %q unescaped", bad)
		}
	}
	if strings.Contains(page, strings.Repeat("r", ReasonBytes)) || strings.Contains(page, strings.Repeat("b", PreviewBytes)) {
		t.Error("a reason or body is shown beyond its bound")
	}
	if !strings.Contains(page, "/status/queues/q%3C%2Ftd%3E%3Cscript%3E/requeue") {
		t.Errorf("the requeue form's action does not escape the queue's name:\n%s", page)
	}
}

func TestRenderEmptyStates(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := Render(&b, View{Generated: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "No queues are configured.") {
		t.Errorf("no empty state for no queues:\n%s", b.String())
	}
	b.Reset()
	if err := Render(&b, View{Generated: time.Now(), Queues: []Queue{{Name: "jobs", Poison: Poison{Name: "jobs-poison"}}}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "No poisoned messages.") {
		t.Errorf("no empty state for an empty poison queue:\n%s", b.String())
	}
}

func TestFormats(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ got, want string }{
		{FormatRate(0), "0/s"},
		{FormatRate(0.05), "3.0/min"},
		{FormatRate(12.34), "12.3/s"},
		{FormatMoney(0), "$0.00"},
		{FormatMoney(0.00042), "$0.0004"},
		{FormatMoney(457.2), "$457.20"},
		{FormatDuration(850 * time.Millisecond), "850ms"},
		{FormatDuration(12300 * time.Millisecond), "12.3s"},
		{FormatDuration(4*time.Minute + 5*time.Second), "4m05s"},
		{FormatDuration(3*time.Hour + 20*time.Minute), "3h20m"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestSessionSurvivesATossedCookie: cookies are per host, not per port, so
// any other service on the endpoint's host (or a page it serves) can set a
// cookie of the session's name with a longer path, which the browser then
// sends first. A bad cookie of that name must not hide the good one.
func TestSessionSurvivesATossedCookie(t *testing.T) {
	t.Parallel()
	s := NewSessions("tok-1", "8089", time.Now)
	good := s.Login()
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Cookie", good.Name+"=tossed.by-another-port; "+good.Name+"="+good.Value)
	if got := s.Session(r); got != good.Value {
		t.Errorf("Session with a tossed cookie before the real one = %q, want the real session", got)
	}
}

// A batch handler's queue shows its calls beside the messages processed;
// a queue of single messages shows none.
func TestRenderShowsBatchCalls(t *testing.T) {
	t.Parallel()
	v := View{Generated: time.Now(), Queues: []Queue{
		{Name: "rows", Processed: 1000, BatchCalls: 12},
		{Name: "mail", Processed: 7},
	}}
	var b bytes.Buffer
	if err := Render(&b, v); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if !strings.Contains(page, "in 12 calls") || strings.Count(page, "batch-calls") != 1 {
		t.Errorf("the page shows batch calls wrongly:\n%s", page)
	}
}
