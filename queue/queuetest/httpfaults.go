package queuetest

import (
	"bytes"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// HTTPFaultProxy is a loopback HTTP reverse proxy in front of a server
// spoken to over HTTP (an emulator: Azurite, fauxqs) for the faults a
// FaultProxy cannot make because they are answers: a 503 ServerBusy with a
// Retry-After, a 500, throttling, given by the proxy instead of the server.
// It can also hang up on a request, before or after the server acted, so a
// test that mixes faults along one stream of requests needs one proxy.
// Every fault is armed by count (Arm, ArmEvery), never by a wall-clock
// rate: a slow machine slows a fault test but cannot starve it.
//
// The answers are the backend's own (each driver's tests say how its
// service writes an error, with Answer); the proxy knows no protocol.
type HTTPFaultProxy struct {
	// URL is the proxy's http://127.0.0.1:PORT: put it where the server's
	// scheme, host and port would go.
	URL string

	kind  func(r *http.Request, body []byte) string
	rp    *httputil.ReverseProxy
	srv   *http.Server
	tr    *http.Transport
	delay atomic.Int64 // ns
	conns atomic.Int64 // client connections open now

	mu       sync.Mutex
	faults   []HTTPFault    // armed, taken in turn
	next     int            // index into faults of the next to land
	every    int            // a fault lands on every every-th request of a kind …
	left     int            // … this many more times
	seen     map[string]int // requests by kind since the arming
	requests map[string]int
	landed   map[string]int
}

// HTTPFault is what the proxy does to one request instead of forwarding
// it: Name counts it in Counts; Do answers, using forward to pass the
// request to the server if the fault needs the server to act.
type HTTPFault struct {
	Name string
	Do   func(w http.ResponseWriter, r *http.Request, forward func(http.ResponseWriter))
}

// Answer is a fault that answers with status, header and body instead of
// the server (which never sees the request).
func Answer(name string, status int, header http.Header, body []byte) HTTPFault {
	return HTTPFault{Name: name, Do: func(w http.ResponseWriter, _ *http.Request, _ func(http.ResponseWriter)) {
		for k, vs := range header {
			w.Header()[k] = append([]string(nil), vs...)
		}
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}}
}

// HangUp closes the client's connection before the server sees the
// request (a request dropped on the way).
var HangUp = HTTPFault{Name: "hang_up", Do: func(w http.ResponseWriter, _ *http.Request, _ func(http.ResponseWriter)) {
	hangUp(w)
}}

// LoseAnswer passes the request to the server, which acts on it, and
// closes the client's connection instead of answering (an answer lost on
// the way).
var LoseAnswer = HTTPFault{Name: "lose_answer", Do: func(w http.ResponseWriter, _ *http.Request, forward func(http.ResponseWriter)) {
	forward(httptest.NewRecorder())
	hangUp(w)
}}

func hangUp(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = conn.Close()
	}
}

// NewHTTPFaultProxy starts a proxy on 127.0.0.1 that forwards to target
// (an http:// URL; its path is ignored: requests keep theirs). kind names a
// request for Counts (nil: "request"); it sees the request's body. The
// proxy stops when the test ends.
func NewHTTPFaultProxy(tb testing.TB, target string, kind func(r *http.Request, body []byte) string) *HTTPFaultProxy {
	tb.Helper()
	tu, err := url.Parse(target)
	if err != nil {
		tb.Fatal(err)
	}
	tu.Path, tu.RawPath = "", ""
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	if kind == nil {
		kind = func(*http.Request, []byte) string { return "request" }
	}
	p := &HTTPFaultProxy{
		URL:      "http://" + ln.Addr().String(),
		kind:     kind,
		requests: map[string]int{},
		landed:   map[string]int{},
	}
	p.tr = http.DefaultTransport.(*http.Transport).Clone()
	// A connection per request: a kept-alive one may be closed by the
	// server (Node's keep-alive is 5 s) as the proxy sends on it, and on a
	// loaded machine no idle timeout of the proxy's is sure to come first;
	// the client would see a fault nobody armed.
	p.tr.DisableKeepAlives = true
	p.rp = &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(tu) },
		Transport: p.tr,
		ErrorLog:  log.New(io.Discard, "", 0), // requests cancelled by their callers are expected
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the caller gave up
			}
			// Counted with the faults: the client sees a 502 the proxy made.
			p.mu.Lock()
			p.landed[UpstreamError]++
			p.mu.Unlock()
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve), ConnState: func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			p.conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			p.conns.Add(-1)
		}
	}}
	go func() { _ = p.srv.Serve(ln) }()
	tb.Cleanup(p.Close)
	return p
}

// Close stops the proxy.
func (p *HTTPFaultProxy) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.srv.Shutdown(ctx)
	p.tr.CloseIdleConnections()
}

// Arm gives each of the next n requests a fault, taking faults in turn.
// n = 0 disarms.
func (p *HTTPFaultProxy) Arm(n int, faults ...HTTPFault) { p.ArmEvery(1, n, faults...) }

// ArmEvery gives every k-th request of each kind (as the proxy's kind
// names them) from now a fault, n in all, taking faults in turn: the
// faults are bounded by the requests made, so however slowly they come,
// k-1 of every k requests of a kind reach the server, and a kind that is
// rare beside another (a get beside the deletes of its messages) still
// meets faults.
func (p *HTTPFaultProxy) ArmEvery(k, n int, faults ...HTTPFault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(faults) == 0 || k < 1 {
		n = 0
	}
	p.faults, p.next, p.every, p.left, p.seen = faults, 0, k, n, map[string]int{}
}

// Armed is how many armed faults have not landed yet.
func (p *HTTPFaultProxy) Armed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.left
}

// SetDelay holds every request d before it is handled (a far server; 0:
// none). A latency for benchmarks and timeouts, not a fault.
func (p *HTTPFaultProxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// OpenConns is how many client connections to the proxy are open now.
// The proxy never closes an idle one itself (its server has no idle
// timeout, and it reaches the backend on connections of its own), so a
// client's connection stays open until the client closes it: a test
// counts them to see that a client released its connections.
func (p *HTTPFaultProxy) OpenConns() int { return int(p.conns.Load()) }

// UpstreamError names, in Counts' faults, the requests the proxy could not
// pass to the server (answered 502 Bad Gateway).
const UpstreamError = "upstream_error"

// Counts returns copies of the requests seen and the faults landed, by
// kind and by fault name (UpstreamError among them).
func (p *HTTPFaultProxy) Counts() (requests, faults map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	requests, faults = make(map[string]int, len(p.requests)), make(map[string]int, len(p.landed))
	for k, v := range p.requests {
		requests[k] = v
	}
	for k, v := range p.landed {
		faults[k] = v
	}
	return requests, faults
}

func (p *HTTPFaultProxy) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		hangUp(w)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	k := p.kind(r, body)
	p.mu.Lock()
	p.requests[k]++
	var f *HTTPFault
	if p.left > 0 {
		p.seen[k]++
		if p.seen[k]%p.every == 0 {
			f = &p.faults[p.next%len(p.faults)]
			p.next++
			p.left--
			p.landed[f.Name]++
		}
	}
	p.mu.Unlock()
	if d := time.Duration(p.delay.Load()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	forward := func(w http.ResponseWriter) { p.rp.ServeHTTP(w, r) }
	if f != nil {
		f.Do(w, r, forward)
		return
	}
	forward(w)
}
