package queuetest_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue/queuetest"
)

// echoServer answers each line with the same line and counts the lines it
// received: the "server acted" side of a fault.
type echoServer struct {
	ln    net.Listener
	lines atomic.Int64
}

func newEchoServer(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					s.lines.Add(1)
					if _, err := io.WriteString(c, line); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return s
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	// A deadline only so a broken proxy fails the test instead of hanging
	// it; no case waits for it.
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	return &client{c: c, r: bufio.NewReader(c)}
}

func (c *client) call(line string) (string, error) {
	if _, err := io.WriteString(c.c, line+"\n"); err != nil {
		return "", err
	}
	return c.r.ReadString('\n')
}

func TestFaultProxyForwards(t *testing.T) {
	s := newEchoServer(t)
	p := queuetest.NewFaultProxy(t, s.ln.Addr().String())
	c := dial(t, p.Addr())
	for _, l := range []string{"a", "b", "c"} {
		if got, err := c.call(l); err != nil || got != l+"\n" {
			t.Fatalf("call %q = %q, %v", l, got, err)
		}
	}
	if n := p.Counts().Accepted; n != 1 {
		t.Errorf("accepted %d connections, want 1", n)
	}
}

func TestFaultProxyLosesTheReplyAfterTheServerActed(t *testing.T) {
	s := newEchoServer(t)
	p := queuetest.NewFaultProxy(t, s.ln.Addr().String())
	idle := dial(t, p.Addr())
	if _, err := idle.call("warm"); err != nil {
		t.Fatal(err)
	}
	c := dial(t, p.Addr())
	p.LoseReplies(1)
	if got, err := c.call("x"); err == nil {
		t.Fatalf("the reply was forwarded: %q", got)
	}
	if n := s.lines.Load(); n != 2 {
		t.Errorf("the server received %d lines, want 2: it must act on the request whose reply is lost", n)
	}
	// A connection that wrote before the arming keeps working; the fault
	// was used up by one reply.
	if got, err := idle.call("y"); err != nil || got != "y\n" {
		t.Errorf("the other connection: %q, %v", got, err)
	}
	if c := p.Counts(); c.Lost != 1 || c.ArmedLeft != 0 {
		t.Errorf("counts %+v, want 1 lost, none armed", c)
	}
}

func TestFaultProxyDropsTheRequestBeforeTheServer(t *testing.T) {
	s := newEchoServer(t)
	p := queuetest.NewFaultProxy(t, s.ln.Addr().String())
	c := dial(t, p.Addr())
	p.DropRequests(1)
	if _, err := c.call("x"); err == nil {
		t.Fatal("the request was forwarded")
	}
	c2 := dial(t, p.Addr())
	if got, err := c2.call("z"); err != nil || got != "z\n" {
		t.Fatalf("after the fault: %q, %v", got, err)
	}
	if n := s.lines.Load(); n != 1 {
		t.Errorf("the server received %d lines, want only the one after the fault", n)
	}
	if c := p.Counts(); c.Dropped != 1 {
		t.Errorf("counts %+v, want 1 dropped", c)
	}
}

func TestFaultProxyHoldsRepliesUntilReleased(t *testing.T) {
	s := newEchoServer(t)
	p := queuetest.NewFaultProxy(t, s.ln.Addr().String())
	c := dial(t, p.Addr())
	release, err := p.HoldReplies()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.HoldReplies(); !errors.Is(err, queuetest.ErrAlreadyHolding) {
		t.Fatalf("a second hold: %v", err)
	}
	got := make(chan string, 1)
	go func() {
		l, _ := c.call("h")
		got <- l
	}()
	// The request reaches the server while its reply is held.
	for s.lines.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	// The reply reaches the proxy and waits there: Held counts it.
	for p.Counts().Held == 0 {
		time.Sleep(time.Millisecond)
	}
	select {
	case l := <-got:
		t.Fatalf("the reply came before the release: %q", l)
	default:
	}
	release()
	if l := <-got; l != "h\n" {
		t.Errorf("after the release: %q", l)
	}
	if n := p.Counts().Held; n != 0 {
		t.Errorf("%d replies still held after the release", n)
	}
}

func TestFaultProxyDropAllAndRefuse(t *testing.T) {
	s := newEchoServer(t)
	p := queuetest.NewFaultProxy(t, s.ln.Addr().String())
	c := dial(t, p.Addr())
	if _, err := c.call("a"); err != nil {
		t.Fatal(err)
	}
	p.DropAll()
	if _, err := c.call("b"); err == nil {
		t.Error("a dropped connection still answered")
	}
	p.Refuse(true)
	r := dial(t, p.Addr())
	if _, err := r.call("c"); err == nil {
		t.Error("a refused connection answered")
	}
	p.Refuse(false)
	ok := dial(t, p.Addr())
	if got, err := ok.call("d"); err != nil || got != "d\n" {
		t.Errorf("after refusing: %q, %v", got, err)
	}
	if c := p.Counts(); c.Drops != 1 || c.Refused != 1 {
		t.Errorf("counts %+v", c)
	}
}

// TestFaultProxyHoldsRequestsUntilReleased: a held request fails its
// client's call at once and does not reach the server; a call sent again
// on another connection does; the release delivers the held request late,
// after it, and returns once the server has acted on it.
func TestFaultProxyHoldsRequestsUntilReleased(t *testing.T) {
	s := newEchoServer(t)
	p := queuetest.NewFaultProxy(t, s.ln.Addr().String())
	if _, err := p.HoldRequests(0); err == nil {
		t.Fatal("HoldRequests(0) was accepted")
	}
	first := dial(t, p.Addr())
	if _, err := first.call("warm"); err != nil {
		t.Fatal(err)
	}
	release, err := p.HoldRequests(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.HoldRequests(1); !errors.Is(err, queuetest.ErrAlreadyHoldingRequests) {
		t.Fatalf("a second hold: %v", err)
	}
	if got, err := first.call("late"); err == nil {
		t.Fatalf("the held request was answered: %q", got)
	}
	if c := p.Counts(); c.HeldRequests != 1 {
		t.Fatalf("counts %+v, want 1 request held", c)
	}
	// The call sent again: the hold took its one request.
	again := dial(t, p.Addr())
	if got, err := again.call("again"); err != nil || got != "again\n" {
		t.Fatalf("the call sent again: %q, %v", got, err)
	}
	if n := s.lines.Load(); n != 2 {
		t.Fatalf("before the release the server received %d lines, want 2 (warm, again)", n)
	}
	release()
	if n := s.lines.Load(); n != 3 {
		t.Errorf("after the release the server received %d lines, want 3: the held request arrives late", n)
	}
	release() // a second call does nothing
	if c := p.Counts(); c.HeldRequests != 0 || c.Open != 1 {
		t.Errorf("counts %+v, want no request held and only the second connection open", c)
	}
	if got, err := again.call("after"); err != nil || got != "after\n" {
		t.Errorf("after the release: %q, %v", got, err)
	}
	// A new hold can be armed once the old one is released.
	r2, err := p.HoldRequests(1)
	if err != nil {
		t.Fatal(err)
	}
	r2() // released before it took any request
	if got, err := again.call("free"); err != nil || got != "free\n" {
		t.Errorf("after a hold released unused: %q, %v", got, err)
	}
}
