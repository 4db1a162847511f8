// Package testutil holds the few helpers adaptq's tests share across
// packages.
package testutil

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// SyncBuffer is a bytes.Buffer safe for concurrent use: output that a test
// reads while handlers, loggers or child processes may still write.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// Sync does nothing; it lets a SyncBuffer serve as a zap sink.
func (s *SyncBuffer) Sync() error { return nil }

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// HangGuard is how long a test waits for something that should happen
// before it calls the wait a hang. It is not a speed test: on a machine
// kept busy by other work a step may take many times its usual time, and
// a test fails on outcomes, never on that. Two minutes: far beyond any
// step of the suite, well within go test's -timeout.
const HangGuard = 2 * time.Minute

// Guard is the hang guard for a wait whose usual length is d: d, or
// HangGuard if that is longer.
func Guard(d time.Duration) time.Duration { return max(d, HangGuard) }

// Eventually polls cond until it holds, and fails the test naming what it
// waited for if Guard(timeout) passes first. It never asserts on how long
// that took: the wait only bounds a test that would otherwise hang. It
// polls often at first and then every few milliseconds, so that a long
// wait does not take a core from the work it waits for.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	timeout = Guard(timeout)
	deadline := time.Now().Add(timeout)
	pause := 100 * time.Microsecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, 5*time.Millisecond)
	}
}

// Runner is what RunInBackground runs: a worker (adaptq.Worker), which this
// package cannot name without an import cycle.
type Runner interface {
	Run(ctx context.Context) error
	Ready() <-chan struct{}
}

// RunInBackground runs r until the test ends, and returns once r is ready.
// At the end of the test it cancels r's context and fails the test if Run
// returned an error; a Run that fails before it is ready fails the test at
// once.
func RunInBackground(t testing.TB, r Runner) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-r.Ready():
	case err := <-done:
		done <- err // for the cleanup
		t.Fatalf("Run: %v", err)
	case <-time.After(HangGuard):
		t.Fatal("did not start")
	}
}

// Send sends method path to the HTTP endpoint at addr (an admin endpoint)
// with body (nil for none) and headers given as name, value pairs ("Host"
// sets the request's Host), without following redirects, and returns the
// response and its whole body.
func Send(t testing.TB, addr, method, path string, body io.Reader, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1]
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// Request sends method path to addr with the Host header host (addr if
// empty), body and the extra headers, and returns the status.
func Request(t testing.TB, addr, method, path, host, body string, headers ...string) int {
	t.Helper()
	if host != "" {
		headers = append(headers, "Host", host)
	}
	resp, _ := Send(t, addr, method, path, strings.NewReader(body), headers...)
	return resp.StatusCode
}

// Bearer is the header pair that sends token, none when it is empty.
func Bearer(token string) []string {
	if token == "" {
		return nil
	}
	return []string{"Authorization", "Bearer " + token}
}

// PageRequest sends method path to the admin endpoint at addr with a form
// body (if form is not nil) and the cookie and extra headers given, without
// following redirects; it returns the response and its body.
func PageRequest(t testing.TB, addr, method, path string, form url.Values, cookie *http.Cookie, headers ...string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
		headers = append(headers, "Content-Type", "application/x-www-form-urlencoded")
	}
	if cookie != nil {
		headers = append(headers, "Cookie", (&http.Cookie{Name: cookie.Name, Value: cookie.Value}).String())
	}
	resp, b := Send(t, addr, method, path, body, headers...)
	return resp, string(b)
}

// SessionCookie returns the status page's session cookie a response sets,
// failing the test if it sets none.
func SessionCookie(t testing.TB, resp *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range resp.Cookies() {
		if strings.HasPrefix(c.Name, "adaptq_admin_") {
			return c
		}
	}
	t.Fatalf("%s: no session cookie in %q", resp.Status, resp.Header.Values("Set-Cookie"))
	return nil
}
