package admin

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
)

// onceFrom sends one request from the loopback address ip on a connection
// of its own (closed after it), and returns the status.
func onceFrom(t *testing.T, ip, addr, method, path string, headers ...string) int {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(context.Background(), method, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestGuessersFillingTheThrottleDoNotLockOutTheOperator: a guesser with
// more addresses than the throttle remembers (an IPv6 /52 holds 4,096
// /64s; here 127.1.x.y) sends one wrong token from each. The throttle
// forgets the operator's full bucket to make room, the guessers' buckets
// fill the table, and the shared overflow bucket the guesser then drains
// is where the operator's next request lands: 429 for the right token, on
// every route, for as long as the guesser keeps going. A client that has
// presented the right token must keep a bucket of its own.
func TestGuessersFillingTheThrottleDoNotLockOutTheOperator(t *testing.T) {
	t.Parallel()
	const token = "Kv9qWx2mLp7zHn4t"
	fake := clock.NewFake(clock.Epoch)
	s, err := Start(newFakeWorker(t), Options{Address: "127.0.0.1:0", Token: token, Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	addr := s.Addr()
	const operator = "127.0.0.2"
	right := []string{"Authorization", "Bearer " + token}
	if got := onceFrom(t, operator, addr, "GET", StatsPath, right...); got != http.StatusOK {
		t.Fatalf("the operator's first GET %s: %d", StatsPath, got)
	}
	wrong := []string{"Authorization", "Bearer wrong-guess-000000"}
	for i := range maxThrottledClients + 2*AuthFailureBurst {
		ip := net.IPv4(127, 1, byte(i>>8), byte(i)).String()
		if got := onceFrom(t, ip, addr, "GET", StatsPath, wrong...); got != http.StatusUnauthorized && got != http.StatusTooManyRequests {
			t.Fatalf("a wrong token from %s: %d", ip, got)
		}
	}
	if got := onceFrom(t, operator, addr, "GET", StatsPath, right...); got != http.StatusOK {
		t.Errorf("the operator's GET %s with the right token after %d guessing addresses: %d, want 200", StatsPath, maxThrottledClients+2*AuthFailureBurst, got)
	}
}

// TestSlowHeadersCannotHoldEverySlot: MaxConns connections that send a
// request's headers a byte at a time (slowloris) are neither idle nor
// active: the limit does not close them for a newcomer, so they hold every
// slot until ReadHeaderTimeout (5 s by default; a minute here) and a probe
// waits in the backlog meanwhile; a kubelet's probe gives up after 1 s by
// default. A connection that has not yet sent a whole request must be as
// closable as an idle one.
func TestSlowHeadersCannotHoldEverySlot(t *testing.T) {
	t.Parallel()
	const limit = 4
	addr := startLimited(t, Options{MaxConns: limit, ReadHeaderTimeout: time.Minute})
	for range limit {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "GET "+HealthPath+" HTTP/1.1\r\nHost: "+addr+"\r\nX-Slow: "); err != nil {
			t.Fatal(err)
		}
	}
	// The client's timeout only ends the wait if the probe is never served
	// while the slow connections hold (a minute): it decides nothing about
	// speed.
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 15 * time.Second}).Get("http://" + addr + HealthPath)
	if err != nil {
		if strings.Contains(err.Error(), "Timeout") || strings.Contains(err.Error(), "deadline") {
			t.Fatalf("GET %s while %d connections send their headers slowly: not served (%v)", HealthPath, limit, err)
		}
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", HealthPath, resp.Status)
	}
}

// TestSlowBodiesCannotHoldEverySlot: a request with a small body the
// route never reads (GET /healthz, Content-Length: 100, one byte sent) is
// active, not idle: net/http reads the unread body before it answers (up to
// 256 KiB, until ReadTimeout, 10 s), so MaxConns of them, with no token and
// no throttle, hold every slot and a probe waits in the backlog. A body
// the route did not read must not hold the connection.
func TestSlowBodiesCannotHoldEverySlot(t *testing.T) {
	t.Parallel()
	const limit = 4
	addr := startLimited(t, Options{MaxConns: limit})
	for range limit {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "GET "+HealthPath+" HTTP/1.1\r\nHost: "+addr+"\r\nContent-Length: 100\r\n\r\nx"); err != nil {
			t.Fatal(err)
		}
	}
	// The timeout (under adminReadTimeout, 10 s) only ends the wait if
	// the probe is not served while the slow bodies hold.
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: adminReadTimeout * 3 / 4}).Get("http://" + addr + HealthPath)
	if err != nil {
		t.Fatalf("GET %s while %d connections trickle a body: not served (%v)", HealthPath, limit, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", HealthPath, resp.Status)
	}
}
