package postgres_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// faultProxy forwards TCP connections to the server and drops them when
// told: what a failover, a restarted pgbouncer or a flaky network does to
// a worker.
type faultProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	drops atomic.Int64
}

func startProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.dropAll()
	})
	return p
}

func (p *faultProxy) addr() string { return p.ln.Addr().String() }

func (p *faultProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c] = struct{}{}
		p.conns[s] = struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		go pipe(c, s)
		go pipe(s, c)
	}
}

// dropAll closes every connection in both directions at once.
func (p *faultProxy) dropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
	p.drops.Add(1)
}

// TestDroppedConnections drains a queue through a proxy that drops every
// connection at random moments, in the middle of Gets, deletes and the
// LISTEN connection: every error the consumer sees is transient, and every
// message is handled; a message whose Get was cut off comes back after its
// visibility timeout, as after a crash.
func TestDroppedConnections(t *testing.T) {
	schema := pgtest.Schema(t)
	base := pgtest.URL(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	u.Host = proxy.addr()
	ctx := context.Background()

	direct := openDB(t, schema)
	dq, err := direct.Queue(ctx, "chaos")
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	put := putMany(t, dq, n)

	db, err := postgres.Open(ctx, u.String(), postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q, err := db.Queue(ctx, "chaos")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancelSub := context.WithCancel(ctx)
	defer cancelSub()
	if _, err := q.Subscribe(sctx); err != nil {
		t.Fatal(err)
	}

	// The faults are counted in operations, not seconds: every dropEvery-th
	// call (Get or DeleteBatch, by any consumer) drops every connection
	// while the other consumers are mid-call, maxDrops times in all. A slow
	// machine (a TLS handshake of 80 ms here) then slows the drain but
	// cannot starve it, and the faults land however fast it runs.
	const (
		dropEvery = 5
		maxDrops  = 25
	)
	var ops atomic.Int64
	chaos := func() {
		if n := ops.Add(1); n%dropEvery == 0 && n/dropEvery <= maxDrops {
			proxy.dropAll()
		}
	}

	var (
		mu        sync.Mutex
		got       = map[string]bool{} // every message some Get returned
		deleted   int                 // deletes confirmed
		transient atomic.Int64
		bad       []error
	)
	record := func(err error) {
		if queue.IsTransient(err) {
			transient.Add(1)
			return
		}
		mu.Lock()
		bad = append(bad, err)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				chaos()
				ms, err := q.Get(ctx, queue.MaxBatchSize, 2*time.Second)
				if err != nil {
					record(err)
					continue
				}
				if len(ms) == 0 {
					// Empty, or the rest hidden by Gets whose replies were
					// lost: done when the queue is.
					if c, err := dq.Count(ctx); err == nil && c == 0 {
						return
					}
					time.Sleep(50 * time.Millisecond)
					continue
				}
				mu.Lock()
				for _, m := range ms {
					got[m.ID] = true
				}
				mu.Unlock()
				rs := make([]queue.Receipt, len(ms))
				for i, m := range ms {
					rs[i] = queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt}
				}
				chaos()
				res, err := q.DeleteBatch(ctx, rs)
				if err != nil {
					record(err)
					continue
				}
				mu.Lock()
				for _, r := range res {
					switch {
					case r == nil:
						deleted++
					case errors.Is(r, queue.ErrNotFound), errors.Is(r, queue.ErrReceiptMismatch):
						// deleted by a batch whose reply was lost, or got again
					case queue.IsTransient(r):
						transient.Add(1)
					default:
						bad = append(bad, r)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d errors were not classified transient; the first: %v", len(bad), bad[0])
	}
	c, err := dq.Count(ctx)
	if err != nil || c != 0 {
		t.Fatalf("after the drain the queue holds %d messages (%v)", c, err)
	}
	lost := 0
	for id := range put {
		if !got[id] {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d messages were deleted without any Get returning them", lost, n)
	}
	t.Logf("%d drops, %d transient errors, %d of %d deletes confirmed", proxy.drops.Load(), transient.Load(), deleted, n)
	if proxy.drops.Load() < maxDrops || transient.Load() == 0 {
		t.Fatalf("the proxy dropped connections %d times and the consumer saw %d transient errors: the faults did not land", proxy.drops.Load(), transient.Load())
	}
}
