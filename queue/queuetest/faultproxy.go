package queuetest

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// FaultProxy is a loopback TCP proxy in front of a real server that injects
// the faults a network and a server really have, each armed by count, never
// by a wall-clock rate, so a slow machine slows a fault test but cannot
// starve or fail it:
//
//   - DropAll closes every open connection at once (a failover, a restarted
//     pooler, a network blip).
//   - Refuse makes new connections fail (a server that is down).
//   - LoseReplies(n): the next n replies the server sends on a connection
//     whose client wrote after the call are not forwarded; the connection
//     is closed instead. The server acted, the client never hears.
//   - DropRequests(n): the next n requests are not forwarded; the
//     connection is closed. The server never acts.
//   - HoldReplies: replies on connections whose client wrote after the call
//     wait until the returned release func is called (a slow server, or a
//     reply still in flight when the caller gives up).
//   - HoldRequests(n): the next n requests wait in the proxy while their
//     clients see their connections fail; release delivers them to the
//     server. A request late in the network, acted on after the client
//     gave up and sent its call again.
//
// A "request" and a "reply" are what one read from either side returns:
// for request/response protocols (RESP, the PostgreSQL protocol, HTTP/1.1)
// the first read after a request is the start of its reply. A connection's
// bytes stay in order.
type FaultProxy struct {
	ln     net.Listener
	target string

	refuse atomic.Bool
	gen    atomic.Int64 // bumped by every arming call

	mu        sync.Mutex
	conns     map[*proxyConn]struct{}
	loseFrom  int64 // replies on conns written at gen ≥ loseFrom are lost …
	lose      int   // … this many more
	dropFrom  int64
	drop      int
	holdFrom  int64 // 0: not holding
	holdCh    chan struct{}
	accepted  int64
	drops     int64 // DropAll calls
	lost      int64 // replies lost
	dropped   int64 // requests dropped
	refused   int64
	held      int64        // replies waiting for a release now
	reqHold   *requestHold // nil: not holding requests
	heldReqs  int64        // requests waiting for a release now
	wg        sync.WaitGroup
	closeOnce sync.Once
}

type proxyConn struct {
	client, server net.Conn
	wroteGen       atomic.Int64  // gen at the client's latest write
	repliesDone    chan struct{} // closed when the replies goroutine ends
}

// requestHold is one HoldRequests: the requests it still takes, the
// channel its release closes, and the requests it holds.
type requestHold struct {
	left int
	ch   chan struct{}
	wg   sync.WaitGroup // one per held request, done once it is answered
}

// NewFaultProxy starts a proxy on 127.0.0.1 that forwards to target
// (host:port). It stops, closing every connection, when the test ends.
func NewFaultProxy(t testing.TB, target string) *FaultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &FaultProxy{ln: ln, target: target, conns: map[*proxyConn]struct{}{}}
	p.gen.Store(1)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port: put it where the server's would go.
func (p *FaultProxy) Addr() string { return p.ln.Addr().String() }

// Close stops the proxy and closes every connection; it waits for the
// proxy's goroutines.
func (p *FaultProxy) Close() {
	p.closeOnce.Do(func() {
		_ = p.ln.Close()
		p.mu.Lock()
		if p.holdCh != nil {
			close(p.holdCh)
			p.holdCh, p.holdFrom = nil, 0
		}
		if p.reqHold != nil {
			close(p.reqHold.ch)
			p.reqHold = nil
		}
		p.mu.Unlock()
		p.closeAll()
		p.wg.Wait()
	})
}

func (p *FaultProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refuse.Load() {
			p.mu.Lock()
			p.refused++
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		pc := &proxyConn{client: c, server: s, repliesDone: make(chan struct{})}
		p.mu.Lock()
		p.conns[pc] = struct{}{}
		p.accepted++
		p.mu.Unlock()
		p.wg.Add(2)
		go p.requests(pc)
		go p.replies(pc)
	}
}

// requests copies client → server, dropping a request when armed.
func (p *FaultProxy) requests(pc *proxyConn) {
	defer p.wg.Done()
	defer p.forget(pc)
	buf := make([]byte, 32<<10)
	for {
		k, err := pc.client.Read(buf)
		if k > 0 {
			g := p.gen.Load()
			p.mu.Lock()
			drop := p.drop > 0 && g >= p.dropFrom
			if drop {
				p.drop--
				p.dropped++
			}
			var hold *requestHold
			if !drop && p.reqHold != nil && p.reqHold.left > 0 {
				hold = p.reqHold
				hold.left--
				hold.wg.Add(1)
				p.heldReqs++
			}
			p.mu.Unlock()
			if drop {
				return
			}
			pc.wroteGen.Store(g)
			if hold != nil {
				p.holdRequest(pc, hold, buf[:k])
				return
			}
			if _, werr := pc.server.Write(buf[:k]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// holdRequest holds req, a request HoldRequests took: it closes the
// client's side of the connection at once (the client's call fails, as
// when its timeout fires and it gives up) and keeps the server's side open;
// once released, it writes req to the server and waits for the reply, which
// the replies goroutine reads and cannot forward, and for the connection to
// close.
func (p *FaultProxy) holdRequest(pc *proxyConn, hold *requestHold, req []byte) {
	defer hold.wg.Done()
	req = append([]byte(nil), req...)
	_ = pc.client.Close()
	<-hold.ch
	p.mu.Lock()
	p.heldReqs--
	p.mu.Unlock()
	if _, err := pc.server.Write(req); err == nil {
		<-pc.repliesDone
	}
}

// replies copies server → client, losing or holding a reply when armed.
func (p *FaultProxy) replies(pc *proxyConn) {
	defer p.wg.Done()
	defer close(pc.repliesDone)
	defer p.forget(pc)
	buf := make([]byte, 32<<10)
	for {
		k, err := pc.server.Read(buf)
		if k > 0 {
			w := pc.wroteGen.Load()
			p.mu.Lock()
			lose := p.lose > 0 && w >= p.loseFrom
			if lose {
				p.lose--
				p.lost++
			}
			var hold chan struct{}
			if p.holdCh != nil && w >= p.holdFrom {
				hold = p.holdCh
			}
			p.mu.Unlock()
			if lose {
				return
			}
			if hold != nil {
				p.mu.Lock()
				p.held++
				p.mu.Unlock()
				<-hold
				p.mu.Lock()
				p.held--
				p.mu.Unlock()
			}
			if _, werr := pc.client.Write(buf[:k]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *FaultProxy) forget(pc *proxyConn) {
	_ = pc.client.Close()
	_ = pc.server.Close()
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

func (p *FaultProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pc := range p.conns {
		_ = pc.client.Close()
		_ = pc.server.Close()
	}
}

// DropAll closes every open connection, both ways, at once.
func (p *FaultProxy) DropAll() {
	p.mu.Lock()
	p.drops++
	p.mu.Unlock()
	p.closeAll()
}

// Refuse makes new connections fail at once (true) or succeed again.
func (p *FaultProxy) Refuse(on bool) { p.refuse.Store(on) }

// LoseReplies arms the proxy to lose the next n replies to requests written
// after this call: each such reply is swallowed and its connection closed.
// n = 0 disarms it.
func (p *FaultProxy) LoseReplies(n int) {
	g := p.gen.Add(1)
	p.mu.Lock()
	p.lose, p.loseFrom = n, g
	p.mu.Unlock()
}

// DropRequests arms the proxy to drop the next n requests, closing their
// connections before the server sees them. n = 0 disarms it.
func (p *FaultProxy) DropRequests(n int) {
	g := p.gen.Add(1)
	p.mu.Lock()
	p.drop, p.dropFrom = n, g
	p.mu.Unlock()
}

// ErrAlreadyHolding is HoldReplies' answer while an earlier hold is on.
var ErrAlreadyHolding = errors.New("queuetest: the proxy already holds replies")

// HoldReplies holds every reply to a request written after this call until
// release is called (or the proxy closes); requests still reach the server.
// Replies already on their way are not held.
func (p *FaultProxy) HoldReplies() (release func(), err error) {
	g := p.gen.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.holdCh != nil {
		return nil, ErrAlreadyHolding
	}
	ch := make(chan struct{})
	p.holdCh, p.holdFrom = ch, g
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			if p.holdCh == ch {
				p.holdCh, p.holdFrom = nil, 0
				close(ch)
			}
			p.mu.Unlock()
		})
	}, nil
}

// ErrAlreadyHoldingRequests is HoldRequests' answer while an earlier hold
// of requests is on.
var ErrAlreadyHoldingRequests = errors.New("queuetest: the proxy already holds requests")

// HoldRequests arms the proxy to hold the next n requests (n ≥ 1): each is
// kept in the proxy, not forwarded, and its connection's client side is
// closed at once, so the client's call fails as when its timeout fires,
// and a driver that sends the call again does so on another connection.
// The server's side stays open. release forwards every held request to
// the server, on its own connection, and returns once the server has
// answered each (the answers go nowhere) and their connections closed: a
// request that was late in the network, acted on after the client gave
// up, and after whatever the client did next. Requests the hold has not
// taken by the release are not held; Counts().HeldRequests is how many
// wait now. A request is what one read returns: a call of a few KiB is one.
func (p *FaultProxy) HoldRequests(n int) (release func(), err error) {
	if n < 1 {
		return nil, errors.New("queuetest: HoldRequests wants n ≥ 1")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reqHold != nil {
		return nil, ErrAlreadyHoldingRequests
	}
	h := &requestHold{left: n, ch: make(chan struct{})}
	p.reqHold = h
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			if p.reqHold == h {
				p.reqHold = nil
				close(h.ch)
			}
			p.mu.Unlock()
			h.wg.Wait()
		})
	}, nil
}

// FaultCounts is what a proxy has done so far.
type FaultCounts struct {
	Accepted int64 // connections forwarded
	Open     int64 // connections open now
	Drops    int64 // DropAll calls
	Lost     int64 // replies lost
	Dropped  int64 // requests dropped
	Refused  int64 // connections refused
	// Held is how many replies wait for HoldReplies' release now: a held
	// reply means the server acted on its request.
	Held int64
	// HeldRequests is how many requests wait for HoldRequests' release
	// now: the server has not seen them.
	HeldRequests int64
	// ArmedLeft is how many armed LoseReplies and DropRequests faults have
	// not landed yet.
	ArmedLeft int64
}

// Counts reports what the proxy has done: a fault test checks its faults
// landed.
func (p *FaultProxy) Counts() FaultCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return FaultCounts{
		Accepted: p.accepted, Open: int64(len(p.conns)), Drops: p.drops,
		Lost: p.lost, Dropped: p.dropped, Refused: p.refused, Held: p.held,
		HeldRequests: p.heldReqs,
		ArmedLeft:    int64(p.lose + p.drop),
	}
}
