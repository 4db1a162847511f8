package statuspage

import (
	"crypto/rand"
	"crypto/subtle"
	"net/http"
	"strings"
	"sync"
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

// MaxSessions bounds the sessions an endpoint keeps: an operator team's
// browsers many times over. A login beyond it ends the session that
// expires first.
const MaxSessions = 256

// Sessions issues and checks the status page's login cookie and its
// anti-forgery token. A session lives on the server: the cookie holds a
// random id (256 bits from crypto/rand) that names it, nothing derived
// from the admin token, and the session ends on the server when it
// expires or its browser logs out; a copy of the cookie (another service
// on another port of the host receives it: cookies are per host) is then
// worth nothing. Sessions live in the process: a restart logs every
// browser out, and another worker sharing the token does not accept them.
type Sessions struct {
	key  []byte
	name string
	now  func() time.Time

	mu       sync.Mutex
	sessions map[string]session // by id
}

// session is one login: its expiry and its anti-forgery token.
type session struct {
	expires time.Time
	csrf    string
}

// NewSessions returns the sessions of an admin endpoint whose token is
// token. The cookie is named after port (cookies are per host, not per
// port: two workers on one machine must not overwrite each other's). now
// is the clock that decides expiry.
func NewSessions(token, port string, now func() time.Time) *Sessions {
	return &Sessions{key: []byte(token), name: "adaptq_admin_" + cookieSafe(port), now: now, sessions: map[string]session{}}
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

// randomID is 256 bits from crypto/rand, in base32 (two crypto/rand.Text
// of at least 128 bits each).
func randomID() string {
	return rand.Text() + rand.Text()
}

// Login starts a session that lasts SessionTTL and returns the cookie that
// names it: HttpOnly (no script reads it), SameSite=Strict (no other
// site's page sends it), Path=/.
func (s *Sessions) Login() *http.Cookie {
	now := s.now()
	id := randomID()
	s.mu.Lock()
	for k, v := range s.sessions {
		if !now.Before(v.expires) {
			delete(s.sessions, k)
		}
	}
	for len(s.sessions) >= MaxSessions {
		first := ""
		for k, v := range s.sessions {
			if first == "" || v.expires.Before(s.sessions[first].expires) {
				first = k
			}
		}
		delete(s.sessions, first)
	}
	s.sessions[id] = session{expires: now.Add(SessionTTL), csrf: randomID()}
	s.mu.Unlock()
	return &http.Cookie{
		Name: s.name, Value: id,
		Path: "/", MaxAge: int(SessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
	}
}

// Logout ends on the server every session r's cookies name, and returns
// the cookie that deletes it from the browser. A copy of the cookie is
// refused from then on.
func (s *Sessions) Logout(r *http.Request) *http.Cookie {
	s.mu.Lock()
	for _, c := range r.CookiesNamed(s.name) {
		delete(s.sessions, c.Value)
	}
	s.mu.Unlock()
	return &http.Cookie{Name: s.name, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode}
}

// Len is how many sessions are live (not yet expired or logged out).
func (s *Sessions) Len() int {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.sessions {
		if now.Before(v.expires) {
			n++
		}
	}
	return n
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

func (s *Sessions) valid(id string) bool {
	_, ok := s.lookup(id)
	return ok
}

// lookup returns the live session id names; an expired one is forgotten.
func (s *Sessions) lookup(id string) (session, bool) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.sessions[id]
	if ok && !now.Before(v.expires) {
		delete(s.sessions, id)
		return session{}, false
	}
	return v, ok
}

// CSRF is the anti-forgery token of a session: the page puts it in every
// form, and a state-changing request made with the cookie must carry it.
// A cross-site page can make a browser send the cookie (not with
// SameSite=Strict, but older browsers ignore it) but cannot read the token.
func (s *Sessions) CSRF(id string) string {
	v, ok := s.lookup(id)
	if !ok {
		return ""
	}
	return v.csrf
}

// CheckCSRF reports whether r carries session's anti-forgery token, in the
// CSRFHeader header or the CSRFField form field.
func (s *Sessions) CheckCSRF(r *http.Request, session string) bool {
	got := r.Header.Get(CSRFHeader)
	if got == "" {
		got = r.PostFormValue(CSRFField)
	}
	want := s.CSRF(session)
	return got != "" && want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
