package redis_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/queue/redis"
)

// faultProxy forwards TCP connections to the Redis server and injects
// faults: Cut closes every open connection at once (a network blip, a
// server restart), Refuse makes new connections fail (a server that is
// down), and DropReplies closes a connection instead of forwarding a share
// of the server's replies (the server acted, the client never hears).
type faultProxy struct {
	ln     net.Listener
	target string

	Refuse      atomic.Bool
	DropReplies atomic.Int64 // per thousand replies

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	cuts  atomic.Int64
	drops atomic.Int64
	wg    sync.WaitGroup
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

func (p *faultProxy) Addr() string { return p.ln.Addr().String() }

func (p *faultProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.Refuse.Load() {
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(s, c, false)
		go p.pipe(c, s, true)
	}
}

// pipe copies from src to dst; replies (server to client) may be dropped
// with the connection.
func (p *faultProxy) pipe(dst, src net.Conn, replies bool) {
	defer p.wg.Done()
	defer p.forget(dst, src)
	buf := make([]byte, 32<<10)
	var n uint64
	for {
		k, err := src.Read(buf)
		if k > 0 {
			n++
			if replies && int64(n*2654435761%1000) < p.DropReplies.Load() {
				p.drops.Add(1)
				return
			}
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *faultProxy) forget(a, b net.Conn) {
	_ = a.Close()
	_ = b.Close()
	p.mu.Lock()
	delete(p.conns, a)
	delete(p.conns, b)
	p.mu.Unlock()
}

// Cut closes every open connection.
func (p *faultProxy) Cut() {
	p.cuts.Add(1)
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
}

// TestFaultProxy drains 3,000 messages with the adaptive listener through a
// proxy that cuts every connection every 150 ms, refuses new ones for a
// while, and drops 1% of the server's replies after the server acted. The
// listener only wakes by native notify (its idle sleep is an hour), so the
// blocking connection must come back after every fault. No message is
// lost, the errors that reached the queue are all classified transient,
// and once the faults stop a put wakes the idle listener.
func TestFaultProxy(t *testing.T) {
	c, prefix := newClient(t)
	direct := mustQueue(t, c, "faults")
	opt, err := goredis.ParseURL(serverURL())
	if err != nil {
		t.Fatal(err)
	}
	p := newFaultProxy(t, opt.Addr)
	opt.Addr = p.Addr()
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = time.Second, 2*time.Second, 2*time.Second
	if pw := os.Getenv(redis.PasswordEnv); pw != "" {
		opt.Password = pw
	}
	opt.MaxRetries = -1 // go-redis would retry most faults away; let the queue see them
	rdb := goredis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	viaProxy := redis.New(rdb, redis.WithKeyPrefix(prefix))
	t.Cleanup(func() { _ = viaProxy.Close() })
	m := meter.New(0)
	q, err := viaProxy.Queue("faults", queue.WithObserver(m))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()

	var permanent []error
	var pmu sync.Mutex
	h := newHandledIDs()
	handle := func(_ context.Context, msg *queue.Message) error {
		h.add("listener", msg.ID)
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, err := nativeListener(ctx, q, handle, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- l.Run(ctx) }()

	// Faults while a producer puts through the proxy too, retrying what
	// fails transiently (a retry may put a message twice: at least once).
	ids := map[string]bool{}
	stopFaults := make(chan struct{})
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		p.DropReplies.Store(10)
		for i := 0; ; i++ {
			select {
			case <-stopFaults:
				p.DropReplies.Store(0)
				p.Refuse.Store(false)
				return
			case <-time.After(150 * time.Millisecond):
			}
			p.Cut()
			p.Refuse.Store(i%5 == 4) // every fifth cut, refuse for 150 ms
		}
	}()
	for i := range 3000 {
		for {
			id, err := q.Put(ctx, []byte(fmt.Sprint(i)), queue.PutOptions{})
			if err == nil {
				ids[id] = true
				break
			}
			if !queue.IsTransient(err) {
				pmu.Lock()
				permanent = append(permanent, err)
				pmu.Unlock()
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if i%100 == 99 {
			time.Sleep(20 * time.Millisecond) // spread the puts over the faults
		}
	}
	eventually(t, 3*time.Minute, "every acknowledged put handled", func() bool { return h.covers(ids) })
	close(stopFaults)
	<-faultsDone

	// The faults are over: the drain ends, and a put wakes the idle
	// listener through its (re-established) blocking connection.
	eventually(t, 2*time.Minute, "the queue is empty", func() bool {
		n, err := direct.Count(context.Background())
		return err == nil && n == 0
	})
	time.Sleep(300 * time.Millisecond)
	last := mustPut(t, direct, "after-the-faults", queue.PutOptions{})
	eventually(t, time.Minute, "a put after the faults wakes the idle listener", func() bool { return h.covers(map[string]bool{last: true}) })
	cancel()
	if err := <-exited; err != nil {
		t.Fatalf("listener: %v", err)
	}

	s := m.Snapshot()
	t.Logf("cuts %d, dropped replies %d; meter %v, errors %d (transient %d); listener %+v",
		p.cuts.Load(), p.drops.Load(), s.Map(), s.TotalErrors(), s.Transient, l.Stats())
	for _, err := range permanent {
		t.Errorf("a put failed with an error not classified transient: %v", err)
	}
	if s.TotalErrors() == 0 {
		t.Error("no call failed: the proxy injected no fault that reached the queue")
	}
	if s.TotalErrors() != s.Transient {
		t.Errorf("%d errors, %d of them transient: every fault here is transient", s.TotalErrors(), s.Transient)
	}
}
