package statuspage

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// SessionTTL is how long a browser stays logged in to the status page
// after it gave the admin token: a working day, so that an operator logs in
// once a shift and a cookie left on a shared machine does not last.
const SessionTTL = 12 * time.Hour

// CSRFField is the form field (and CSRFHeader the header, for scripts) that
// carries the anti-forgery token a state-changing request made with the
// session cookie must send.
const (
	CSRFField  = "csrf"
	CSRFHeader = "X-CSRF-Token"
)

// Sessions issues and checks the status page's login cookie and its
// anti-forgery token. Both are HMAC-SHA256s keyed by the admin token, so
// the token itself never reaches a cookie, a page or a log; every worker
// that shares the token accepts the cookie, and changing the token logs
// every browser out.
type Sessions struct {
	key  []byte
	name string
	now  func() time.Time
}

// NewSessions returns the sessions of an admin endpoint whose token is
// token. The cookie is named after port (cookies are per host, not per
// port: two workers on one machine must not overwrite each other's). now
// is the clock that decides expiry.
func NewSessions(token, port string, now func() time.Time) *Sessions {
	return &Sessions{key: []byte(token), name: "adaptq_admin_" + cookieSafe(port), now: now}
}

func cookieSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return -1
	}, s)
}

// CookieName is the name of the login cookie.
func (s *Sessions) CookieName() string { return s.name }

// CheckToken reports whether got is the admin token (in constant time).
func (s *Sessions) CheckToken(got string) bool {
	return subtle.ConstantTimeCompare([]byte(got), s.key) == 1
}

func (s *Sessions) mac(parts ...string) string {
	m := hmac.New(sha256.New, s.key)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Login returns the cookie that logs a browser in until SessionTTL from
// now: HttpOnly (no script reads it), SameSite=Strict (no other site's page
// sends it), Path=/.
func (s *Sessions) Login() *http.Cookie {
	exp := s.now().Add(SessionTTL).Unix()
	v := strconv.FormatInt(exp, 10)
	return &http.Cookie{
		Name: s.name, Value: v + "." + s.mac("session", v),
		Path: "/", MaxAge: int(SessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
	}
}

// Logout returns the cookie that ends a browser's session.
func (s *Sessions) Logout() *http.Cookie {
	return &http.Cookie{Name: s.name, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode}
}

// Session returns the request's valid, unexpired session cookie value, or
// "" if it has none. It looks at every cookie of its name, not the first:
// cookies are per host, not per port, so another service on the host can
// set one (with a longer path, sent first) to hide the browser's session.
//
// A request the browser says another origin's page made (Sec-Fetch-Site
// same-site or cross-site) has no session: SameSite=Strict keeps the
// cookie from other sites only, and a page on another port of the host or
// on a sibling subdomain is the same site, so without this it could make
// the browser read the endpoint's GET routes (billed calls, poison scans)
// with the session. (Browsers send Sec-Fetch-Site to loopback and HTTPS
// addresses only.)
func (s *Sessions) Session(r *http.Request) string {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-site", "cross-site":
		return ""
	}
	for _, c := range r.CookiesNamed(s.name) {
		if s.valid(c.Value) {
			return c.Value
		}
	}
	return ""
}

func (s *Sessions) valid(v string) bool {
	exp, sig, ok := strings.Cut(v, ".")
	if !ok || !hmac.Equal([]byte(sig), []byte(s.mac("session", exp))) {
		return false
	}
	t, err := strconv.ParseInt(exp, 10, 64)
	return err == nil && s.now().Before(time.Unix(t, 0))
}

// CSRF is the anti-forgery token of a session: the page puts it in every
// form, and a state-changing request made with the cookie must carry it.
// A cross-site page can make a browser send the cookie (not with
// SameSite=Strict, but older browsers ignore it) but cannot read the token.
func (s *Sessions) CSRF(session string) string {
	if session == "" {
		return ""
	}
	return s.mac("csrf", session)
}

// CheckCSRF reports whether r carries session's anti-forgery token, in the
// CSRFHeader header or the CSRFField form field.
func (s *Sessions) CheckCSRF(r *http.Request, session string) bool {
	got := r.Header.Get(CSRFHeader)
	if got == "" {
		got = r.PostFormValue(CSRFField)
	}
	return got != "" && hmac.Equal([]byte(got), []byte(s.CSRF(session)))
}
