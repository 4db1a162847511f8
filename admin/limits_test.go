package admin

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/testutil"
)

// startLimited serves a fakeWorker's endpoint (no token) with the given
// connection bound and timeouts, and returns its address.
func startLimited(t *testing.T, o Options) string {
	t.Helper()
	o.Address = "127.0.0.1:0"
	s, err := Start(newFakeWorker(t), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s.Addr()
}

// keepAlive opens a connection, makes one request on it, reads the answer
// and leaves the connection open and idle (HTTP/1.1 keep-alive).
func keepAlive(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "GET "+HealthPath+" HTTP/1.1\r\nHost: "+addr+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", HealthPath, resp.Status)
	}
	return c
}

// newConnGet GETs path on a connection of its own and returns the status.
func newConnGet(t *testing.T, addr, path string) int {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// closedByServer reports whether the server closed c (a read finds the
// end of the stream). A connection it keeps finds nothing to read: the
// short deadline only ends that wait, it decides nothing about time.
func closedByServer(t *testing.T, c net.Conn) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	switch {
	case errors.Is(err, io.EOF):
		return true
	case errors.Is(err, os.ErrDeadlineExceeded):
		return false
	default:
		t.Fatalf("read of an idle connection: %v", err)
		return false
	}
}

// TestAdminHoldsAtMostMaxConnsConnections: idle keep-alive connections
// (21,000 of them once used up the worker's file descriptors) are held up
// to Options.MaxConns; each new one beyond closes the longest idle one, so
// the endpoint holds at most MaxConns and a new caller is served at once.
func TestAdminHoldsAtMostMaxConnsConnections(t *testing.T) {
	t.Parallel()
	const limit, opened = 4, 12
	addr := startLimited(t, Options{MaxConns: limit})
	var conns []net.Conn
	for range opened {
		conns = append(conns, keepAlive(t, addr))
	}
	// A new caller (a probe) is served while every slot is held.
	if got := newConnGet(t, addr, HealthPath); got != http.StatusOK {
		t.Fatalf("GET %s from a new connection: %d", HealthPath, got)
	}
	open := 0
	for _, c := range conns {
		if !closedByServer(t, c) {
			open++
		}
	}
	if open > limit {
		t.Errorf("the endpoint holds %d of %d idle connections open, want at most %d", open, opened, limit)
	}
	// The newest idle connections are the ones kept.
	if closedByServer(t, conns[opened-1]) {
		t.Errorf("the newest idle connection was closed, not the longest idle one")
	}
}

// TestAdminServesANewCallerOnceSilentConnectionsTimeOut: connections that
// send nothing hold every slot; they are closed after ReadHeaderTimeout
// (made short here), and a probe from a new connection, waiting in the
// backlog meanwhile, is then served.
func TestAdminServesANewCallerOnceSilentConnectionsTimeOut(t *testing.T) {
	t.Parallel()
	const limit = 4
	addr := startLimited(t, Options{MaxConns: limit, ReadHeaderTimeout: 100 * time.Millisecond, IdleTimeout: 100 * time.Millisecond})
	var silent []net.Conn
	for range 3 * limit {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		silent = append(silent, c)
	}
	if got := newConnGet(t, addr, HealthPath); got != http.StatusOK {
		t.Fatalf("GET %s from a new connection: %d", HealthPath, got)
	}
	testutil.Eventually(t, time.Second, "the server closes the silent connections", func() bool {
		for _, c := range silent[:limit] {
			if !closedByServer(t, c) {
				return false
			}
		}
		return true
	})
}
