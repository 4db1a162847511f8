package admin

import (
	"context"
	"crypto/rand"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/internal/testutil"
)

// TestWeakTokensAreRefusedAtStartUp: a token anyone could guess (short,
// blank, a placeholder such as the KEDA example's change-me, one character
// repeated) stops Start with an error that names the minimum and never
// the token.
func TestWeakTokensAreRefusedAtStartUp(t *testing.T) {
	t.Parallel()
	for _, tok := range []string{
		"1", " ", "\t", "1234", "Kv9qWx2mLp7zHn4", // short: 15 characters
		"change-me", "changeme", "CHANGE_ME_PLEASE_NOW", "secret", "my-Admin-Secret-2026", "replace-me-with-a-token",
		"                ", "x\tKv9qWx2mLp7zHn4t", " Kv9qWx2mLp7zHn4t", // whitespace
		"aaaaaaaaaaaaaaaa", "0000000000000000", "abababababababab", "Kv9qKv9qKv9qKv9q", // not random
		"1234567890123456",
	} {
		s, err := Start(newFakeWorker(t), Options{Address: "127.0.0.1:0", Token: tok})
		if err == nil {
			s.Stop()
			t.Errorf("Start with token %q served", tok)
			continue
		}
		if !errors.Is(err, ErrWeakToken) || !strings.Contains(err.Error(), "admin.token") {
			t.Errorf("token %q: %v: want ErrWeakToken naming admin.token", tok, err)
		}
		if len(strings.TrimSpace(tok)) > 3 && strings.Contains(err.Error(), tok) {
			t.Errorf("token %q: the error shows it: %v", tok, err)
		}
		if len(strings.TrimSpace(tok)) < MinTokenLength && !strings.Contains(err.Error(), strconv.Itoa(MinTokenLength)) && !strings.Contains(err.Error(), "whitespace") {
			t.Errorf("token %q: %v: want the minimum, %d, named", tok, err, MinTokenLength)
		}
	}
	for _, tok := range []string{rand.Text(), "Kv9qWx2mLp7zHn4t", "3f9c2a7e1b6d4058"} {
		s, err := Start(newFakeWorker(t), Options{Address: "127.0.0.1:0", Token: tok})
		if err != nil {
			t.Errorf("Start with the random token %q: %v", tok, err)
			continue
		}
		s.Stop()
	}
}

// fromAddress is a client whose connections come from the loopback address
// ip (127.0.0.2 is loopback too on Linux): another client address for the
// throttle.
func fromAddress(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// do sends method path with a form (nil: none) and headers, and returns
// the response (its body read and closed).
func do(t *testing.T, c *http.Client, addr, method, path string, form url.Values, headers ...string) *http.Response {
	t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req, err := http.NewRequestWithContext(context.Background(), method, "http://"+addr+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestWrongTokensAreThrottledPerClient: a client address may present
// AuthFailureBurst wrong tokens (bearer or login form, counted together);
// then it gets 429 with Retry-After, even with the right token, until the
// throttle refills on the endpoint's clock (virtual here). Another address
// is not slowed, and a right token does not spend the burst.
func TestWrongTokensAreThrottledPerClient(t *testing.T) {
	t.Parallel()
	const token = "Kv9qWx2mLp7zHn4t"
	fake := clock.NewFake(clock.Epoch)
	s, err := Start(newFakeWorker(t), Options{Address: "127.0.0.1:0", Token: token, Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	addr := s.Addr()
	guesser, operator := fromAddress(t, "127.0.0.1"), fromAddress(t, "127.0.0.2")
	right := []string{"Authorization", "Bearer " + token}

	// Right tokens spend nothing.
	for range 3 * AuthFailureBurst {
		if resp := do(t, guesser, addr, "GET", StatsPath, nil, right...); resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s with the token: %s", StatsPath, resp.Status)
		}
	}
	for i := range AuthFailureBurst {
		var resp *http.Response
		if i%2 == 0 {
			resp = do(t, guesser, addr, "GET", StatsPath, nil, "Authorization", "Bearer guess-"+strconv.Itoa(i))
		} else {
			resp = do(t, guesser, addr, "POST", LoginPath, url.Values{"token": {"guess-" + strconv.Itoa(i)}})
		}
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %s, want 401", i+1, resp.Status)
		}
	}
	for _, tc := range []struct {
		name    string
		method  string
		path    string
		form    url.Values
		headers []string
	}{
		{"a wrong bearer token", "GET", StatsPath, nil, []string{"Authorization", "Bearer guess-x"}},
		{"a wrong login", "POST", LoginPath, url.Values{"token": {"guess-y"}}, nil},
		{"the right bearer token", "GET", StatsPath, nil, right},
		{"the right login", "POST", LoginPath, url.Values{"token": {token}}, nil},
	} {
		resp := do(t, guesser, addr, tc.method, tc.path, tc.form, tc.headers...)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("%s after %d wrong tokens: %s, want 429", tc.name, AuthFailureBurst, resp.Status)
			continue
		}
		if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || time.Duration(ra)*time.Second > AuthFailureRefill {
			t.Errorf("%s: Retry-After %q, want the seconds until the next attempt (at most %s)", tc.name, resp.Header.Get("Retry-After"), AuthFailureRefill)
		}
	}
	// The probes stay open to the throttled address.
	if resp := do(t, guesser, addr, "GET", HealthPath, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s from the throttled address: %s", HealthPath, resp.Status)
	}
	// Another address is not throttled.
	if resp := do(t, operator, addr, "GET", StatsPath, nil, right...); resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s with the token from another address: %s", StatsPath, resp.Status)
	}
	if resp := do(t, operator, addr, "POST", LoginPath, url.Values{"token": {"typo"}}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("one wrong login from another address: %s, want 401", resp.Status)
	}
	// After Retry-After, one more attempt.
	resp := do(t, guesser, addr, "GET", StatsPath, nil, right...)
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	fake.Advance(time.Duration(ra) * time.Second)
	if resp := do(t, guesser, addr, "GET", StatsPath, nil, right...); resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s with the token after Retry-After: %s", StatsPath, resp.Status)
	}
	if resp := do(t, guesser, addr, "GET", StatsPath, nil, "Authorization", "Bearer guess-z"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong token after Retry-After: %s, want 401", resp.Status)
	}
	if resp := do(t, guesser, addr, "GET", StatsPath, nil, "Authorization", "Bearer guess-z"); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a second wrong token after one refill: %s, want 429", resp.Status)
	}
}

// TestThrottleMemoryIsBounded: more client addresses than the throttle
// keeps buckets for share one bucket beyond the bound, so many addresses
// do not buy many guesses.
func TestThrottleMemoryIsBounded(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(clock.Epoch)
	th := newAuthThrottle(fake, zap.NewNop())
	req := func(i int) *http.Request {
		r, _ := http.NewRequest("GET", StatsPath, nil)
		r.RemoteAddr = net.JoinHostPort(net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)).String(), "4000")
		return r
	}
	rw := func() http.ResponseWriter { return &discardWriter{h: http.Header{}} }
	for i := range maxThrottledClients {
		if !th.take(rw(), req(i)) {
			t.Fatalf("address %d throttled at its first wrong token", i)
		}
		th.failed(req(i))
	}
	allowed := 0
	for i := maxThrottledClients; i < maxThrottledClients+10*AuthFailureBurst; i++ {
		if th.take(rw(), req(i)) {
			allowed++
			th.failed(req(i))
		}
	}
	if len(th.buckets) > maxThrottledClients {
		t.Errorf("%d buckets, want at most %d", len(th.buckets), maxThrottledClients)
	}
	if allowed != AuthFailureBurst {
		t.Errorf("%d new addresses beyond the bound got %d wrong tokens, want the shared bucket's %d", 10*AuthFailureBurst, allowed, AuthFailureBurst)
	}
	// IPv6 clients are counted by their /64.
	a, b := req(0), req(0)
	a.RemoteAddr, b.RemoteAddr = "[2001:db8:1:2::1]:4000", "[2001:db8:1:2:ffff::9]:4000"
	if clientKey(a) != clientKey(b) {
		t.Errorf("two addresses of one /64 are different clients: %v, %v", clientKey(a), clientKey(b))
	}
}

type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}

// TestWrongTokensAreSummarisedInTheLog: a hundred wrong logins write two
// warnings, not a hundred: the first at once, with its address, and one
// summary at the end of the interval counting the rest (and those the
// throttle refused).
func TestWrongTokensAreSummarisedInTheLog(t *testing.T) {
	t.Parallel()
	const token = "Kv9qWx2mLp7zHn4t"
	fake := clock.NewFake(clock.Epoch)
	core, logs := observer.New(zap.WarnLevel)
	s, err := Start(newFakeWorker(t), Options{Address: "127.0.0.1:0", Token: token, Clock: fake, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	c := fromAddress(t, "127.0.0.1")
	const attempts = 100
	for i := range attempts {
		if i%2 == 0 {
			do(t, c, s.Addr(), "POST", LoginPath, url.Values{"token": {"guess"}})
		} else {
			do(t, c, s.Addr(), "GET", StatsPath, nil, "Authorization", "Bearer guess")
		}
	}
	if n := logs.Len(); n != 1 {
		t.Fatalf("%d wrong tokens wrote %d warnings before the interval ended, want 1:\n%v", attempts, n, logs.All())
	}
	first := logs.All()[0].ContextMap()
	if first["remote"] != "127.0.0.1" {
		t.Errorf("the first warning names the address %v, want 127.0.0.1", first["remote"])
	}
	fake.Advance(AuthFailureLogInterval)
	testutil.Eventually(t, time.Second, "the summary is logged", func() bool { return logs.Len() == 2 })
	sum := logs.All()[1].ContextMap()
	if sum["wrong"] != int64(AuthFailureBurst-1) || sum["throttled"] != int64(attempts-AuthFailureBurst) {
		t.Errorf("summary %v: want wrong %d, throttled %d", sum, AuthFailureBurst-1, attempts-AuthFailureBurst)
	}
	for _, e := range logs.All() {
		for k, v := range e.ContextMap() {
			if s, ok := v.(string); ok && strings.Contains(s, "guess") {
				t.Errorf("a warning logs the presented token in %s: %q", k, s)
			}
		}
	}
	// A quiet interval writes nothing.
	fake.Advance(AuthFailureLogInterval)
	fake.Advance(AuthFailureLogInterval)
	if n := logs.Len(); n != 2 {
		t.Errorf("%d warnings after quiet intervals, want 2", n)
	}
}
