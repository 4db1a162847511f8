package admin

import (
	"net"
	"net/http"
	"sync"
)

// DefaultMaxConns is how many connections the admin endpoint holds open at
// once (Options.MaxConns, admin.max_connections): its callers are a
// kubelet's two probes, a Prometheus scrape, an autoscaler and a few
// browsers, a handful each; 64 leaves room for many times that and is 6 %
// of the 1,024 file descriptors Linux's default soft limit gives a process,
// so the endpoint can never take the descriptors the handlers need (21,000
// idle connections once used up 20,000 and every exec: handler failed).
const DefaultMaxConns = 64

// connLimit is a listener that holds at most max connections open: when
// every slot is taken it closes the connection that has been idle
// (between keep-alive requests, or before its first request is whole) the
// longest to make room, and when none is idle it accepts nothing until
// one closes. A connection that sends nothing, or its headers slowly,
// holds its slot until ReadHeaderTimeout closes it or a new connection
// needs it, an idle one until IdleTimeout does or a new connection needs
// its slot: so a new caller (a probe) is served at once unless every slot
// runs a request. Connections waiting in the kernel's
// backlog cost the process no descriptor; the one Accept holds while it
// waits for a slot costs one.
type connLimit struct {
	net.Listener
	slots chan struct{} // one token per open connection
	kick  chan struct{} // a connection went idle: a waiting Accept may take it
	done  chan struct{} // closed by Close: unblocks a waiting Accept
	once  sync.Once

	mu   sync.Mutex
	idle map[net.Conn]uint64 // connections between requests or before their first, in the order they became so
	seq  uint64
}

func newConnLimit(ln net.Listener, max int) *connLimit {
	return &connLimit{
		Listener: ln,
		slots:    make(chan struct{}, max),
		kick:     make(chan struct{}, 1),
		done:     make(chan struct{}),
		idle:     map[net.Conn]uint64{},
	}
}

// Accept accepts a connection, then finds it a slot: a free one, else
// the one of the connection idle (or not yet sent a whole request) the
// longest, which it closes; when none is, it waits until one is. It
// closes nothing before a connection is there to take the slot (a
// connection just accepted must get the time to send its request), so the
// endpoint holds at most max connections and one waiting for a slot.
func (l *connLimit) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	for {
		select {
		case l.slots <- struct{}{}:
			return &limitedConn{Conn: c, l: l}, nil
		default:
		}
		l.closeLongestIdle()
		select {
		case l.slots <- struct{}{}:
			return &limitedConn{Conn: c, l: l}, nil
		case <-l.kick:
		case <-l.done:
			_ = c.Close()
			return nil, net.ErrClosed
		}
	}
}

// Close stops accepting: it closes the listener and unblocks a waiting
// Accept.
func (l *connLimit) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// connState is the server's ConnState hook: it keeps the set of
// connections Accept may close: the idle ones, and the new ones that have
// not yet sent a whole request (net/http marks a connection active only
// once a request's headers are read, so one that sends them a byte at a
// time would otherwise hold its slot until ReadHeaderTimeout, and
// MaxConns of them every slot).
func (l *connLimit) connState(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch st {
	case http.StateIdle:
		l.seq++
		l.idle[c] = l.seq
		select {
		case l.kick <- struct{}{}:
		default:
		}
	case http.StateNew:
		l.seq++
		l.idle[c] = l.seq
	default:
		delete(l.idle, c)
	}
}

// closeLongestIdle closes the connection idle the longest, if any.
func (l *connLimit) closeLongestIdle() {
	l.mu.Lock()
	var oldest net.Conn
	var since uint64
	for c, t := range l.idle {
		if oldest == nil || t < since {
			oldest, since = c, t
		}
	}
	delete(l.idle, oldest)
	l.mu.Unlock()
	if oldest != nil {
		_ = oldest.Close()
	}
}

// limitedConn gives its slot back when it is closed (once, however often
// the server and closeLongestIdle close it).
type limitedConn struct {
	net.Conn
	l    *connLimit
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.idle, c)
		c.l.mu.Unlock()
		<-c.l.slots
	})
	return err
}
