package queuetest_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue/queuetest"
)

// actingServer counts the requests it acted on and answers each with its
// body.
func actingServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var acted atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		acted.Add(1)
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}))
	t.Cleanup(s.Close)
	return s, &acted
}

// post sends body to url (a POST, which Go's transport never resends by
// itself) and returns the status and answer, or the error.
func post(c *http.Client, url, body string) (int, string, http.Header, error) {
	resp, err := c.Post(url, "text/plain", strings.NewReader(body))
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header, err
}

func TestHTTPFaultProxyForwardsAndCounts(t *testing.T) {
	srv, acted := actingServer(t)
	p := queuetest.NewHTTPFaultProxy(t, srv.URL+"/ignored", func(r *http.Request, body []byte) string {
		return r.URL.Path + ":" + string(body)
	})
	c := &http.Client{}
	for range 2 {
		if st, got, _, err := post(c, p.URL+"/q", "x"); err != nil || st != 200 || got != "x" {
			t.Fatalf("through the proxy: %d %q %v", st, got, err)
		}
	}
	req, faults := p.Counts()
	if req["/q:x"] != 2 || len(faults) != 0 || acted.Load() != 2 {
		t.Fatalf("requests %v, faults %v, server acted %d", req, faults, acted.Load())
	}
}

// Arm answers the next n requests itself, in turn, and then forwards again.
func TestHTTPFaultProxyArm(t *testing.T) {
	srv, acted := actingServer(t)
	p := queuetest.NewHTTPFaultProxy(t, srv.URL, nil)
	busy := queuetest.Answer("busy", http.StatusServiceUnavailable, http.Header{"Retry-After": {"3"}}, []byte("busy"))
	internal := queuetest.Answer("internal", http.StatusInternalServerError, nil, []byte("oops"))
	p.Arm(3, busy, internal)
	c := &http.Client{}
	want := []int{503, 500, 503, 200}
	for i, w := range want {
		st, body, h, err := post(c, p.URL, "x")
		if err != nil || st != w {
			t.Fatalf("request %d: %d %q %v, want %d", i, st, body, err, w)
		}
		if st == 503 && h.Get("Retry-After") != "3" {
			t.Errorf("request %d: Retry-After %q", i, h.Get("Retry-After"))
		}
	}
	if acted.Load() != 1 {
		t.Fatalf("the server acted on %d requests, want only the last", acted.Load())
	}
	if _, faults := p.Counts(); faults["busy"] != 2 || faults["internal"] != 1 || p.Armed() != 0 {
		t.Fatalf("faults %v, armed %d", faults, p.Armed())
	}
}

// ArmEvery hangs up on every k-th request, before or after the server
// acted, n times in all; the requests in between reach the server.
func TestHTTPFaultProxyArmEvery(t *testing.T) {
	srv, acted := actingServer(t)
	p := queuetest.NewHTTPFaultProxy(t, srv.URL, nil)
	p.ArmEvery(3, 2, queuetest.HangUp, queuetest.LoseAnswer)
	c := &http.Client{}
	var failed []int
	var actedAt []int64
	for i := 1; i <= 7; i++ {
		if _, _, _, err := post(c, p.URL, "x"); err != nil {
			failed = append(failed, i)
		}
		actedAt = append(actedAt, acted.Load())
	}
	if len(failed) != 2 || failed[0] != 3 || failed[1] != 6 {
		t.Fatalf("requests %v failed, want 3 and 6", failed)
	}
	// Request 3 never reached the server; request 6 did.
	if actedAt[2] != 2 || actedAt[5] != 5 || actedAt[6] != 6 {
		t.Fatalf("the server's count after each request: %v", actedAt)
	}
	if _, faults := p.Counts(); faults["hang_up"] != 1 || faults["lose_answer"] != 1 {
		t.Fatalf("faults %v", faults)
	}
	// Every k-th of each kind: a rare kind meets its faults too.
	kinds := queuetest.NewHTTPFaultProxy(t, srv.URL, func(r *http.Request, _ []byte) string { return r.URL.Path })
	kinds.ArmEvery(2, 3, queuetest.HangUp)
	var hit []string
	for _, path := range []string{"/a", "/a", "/a", "/b", "/a", "/b", "/a", "/a"} {
		if _, _, _, err := post(c, kinds.URL+path, "x"); err != nil {
			hit = append(hit, path)
		}
	}
	if strings.Join(hit, " ") != "/a /a /b" {
		t.Fatalf("hung up on %v, want the 2nd and 4th /a and the 2nd /b, then no more", hit)
	}
	p.Arm(0)
	if _, _, _, err := post(c, p.URL, "x"); err != nil {
		t.Fatalf("disarmed: %v", err)
	}
}

// SetDelay holds requests; a caller that gives up is not answered.
func TestHTTPFaultProxyDelay(t *testing.T) {
	srv, acted := actingServer(t)
	p := queuetest.NewHTTPFaultProxy(t, srv.URL, nil)
	p.SetDelay(time.Hour)
	c := &http.Client{Timeout: 100 * time.Millisecond}
	if _, _, _, err := post(c, p.URL, "x"); err == nil {
		t.Fatal("a request held an hour was answered")
	}
	p.SetDelay(0)
	if _, _, _, err := post(&http.Client{}, p.URL, "x"); err != nil {
		t.Fatal(err)
	}
	if acted.Load() != 1 {
		t.Fatalf("the server acted on %d requests, want 1", acted.Load())
	}
}

// A server the proxy cannot reach is a 502, counted as UpstreamError.
func TestHTTPFaultProxyUpstreamError(t *testing.T) {
	srv, _ := actingServer(t)
	p := queuetest.NewHTTPFaultProxy(t, srv.URL, nil)
	srv.Close()
	if st, _, _, err := post(&http.Client{}, p.URL, "x"); err != nil || st != http.StatusBadGateway {
		t.Fatalf("a server that is gone: %d, %v; want 502", st, err)
	}
	if _, faults := p.Counts(); faults[queuetest.UpstreamError] != 1 {
		t.Fatalf("faults %v", faults)
	}
}

// OpenConns counts the client's connections: a kept-alive one stays open,
// however long it idles, until the client closes it.
func TestHTTPFaultProxyOpenConns(t *testing.T) {
	srv, _ := actingServer(t)
	p := queuetest.NewHTTPFaultProxy(t, srv.URL, nil)
	tr := &http.Transport{}
	c := &http.Client{Transport: tr}
	for range 3 {
		if _, _, _, err := post(c, p.URL, "x"); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.OpenConns(); n != 1 {
		t.Fatalf("OpenConns = %d after three requests on one kept-alive connection, want 1", n)
	}
	tr.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second) // a hang guard: the close is on its way
	for p.OpenConns() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("OpenConns = %d after the client closed its connections", p.OpenConns())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A connection the proxy hangs up on is not counted either.
	p.Arm(1, queuetest.HangUp)
	if _, _, _, err := post(c, p.URL, "x"); err == nil {
		t.Fatal("the armed hang-up did not land")
	}
	if n := p.OpenConns(); n != 0 {
		t.Fatalf("OpenConns = %d after a hang-up, want 0", n)
	}
}
