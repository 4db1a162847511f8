package redis

import (
	"context"
	"errors"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/adaptq/adaptq/queue"
)

// Native notify, as BullMQ does it. Every put sets the queue's marker, a
// sorted set of one member scored by when the new message becomes
// visible. In each process, the subscribers of a queue share one hub: one
// goroutine on one dedicated connection that blocks in BZPOPMIN on the
// marker, for up to the block timeout, and signals every subscriber when it
// pops. A put by any process therefore wakes an idle worker at once, and an
// idle worker sends one command per block timeout and nothing else.
//
// BZPOPMIN hands the marker to one of the processes blocked on it. The get
// script sets it again when it leaves visible messages behind, so a backlog
// wakes the other processes one after another. A marker whose score lies in
// the future (a put with an initial visibility delay) signals at once and
// again, by a timer, when the message becomes visible; puts that merged
// into one marker keep the earliest time, and the listener's safety
// interval covers the later ones.

// hub is the subscribers of one queue in one process.
type hub struct {
	c   *Client
	key string

	mu   sync.Mutex
	subs map[chan struct{}]struct{}
	run  *runner // nil when nobody listens
}

// runner is one life of a hub's blocking loop: started by the first
// subscriber, stopped when the last one leaves.
type runner struct {
	mu     sync.Mutex
	stop   bool
	id     int64 // CLIENT ID of the blocking connection, 0 until known
	timers map[*time.Timer]struct{}
	done   chan struct{}
}

// Subscribe returns a channel that receives soon after a message is put to
// the queue by any process, until ctx ends.
func (q *redisQueue) Subscribe(ctx context.Context) (<-chan struct{}, error) {
	c := q.c
	if c.closed.Load() {
		return nil, queue.ErrClosed
	}
	key := q.keys3[2]
	c.mu.Lock()
	h, ok := c.hubs[key]
	if !ok {
		h = &hub{c: c, key: key, subs: map[chan struct{}]struct{}{}}
		c.hubs[key] = h
	}
	c.mu.Unlock()
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	if h.run == nil && !c.closed.Load() {
		r := &runner{done: make(chan struct{}), timers: map[*time.Timer]struct{}{}}
		h.run = r
		go h.loop(r)
	}
	h.mu.Unlock()
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		var r *runner
		if len(h.subs) == 0 {
			r, h.run = h.run, nil
		}
		h.mu.Unlock()
		if r != nil {
			h.halt(r)
		}
	})
	return ch, nil
}

// signal wakes every subscriber; a pending signal absorbs a new one.
func (h *hub) signal() {
	h.mu.Lock()
	for ch := range h.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	h.mu.Unlock()
}

// stop halts the hub's loop, if it runs, and returns it (Client.Close
// waits for it).
func (h *hub) stop() *runner {
	h.mu.Lock()
	r := h.run
	h.run = nil
	h.mu.Unlock()
	if r != nil {
		h.halt(r)
	}
	return r
}

// halt ends r's loop: CLIENT UNBLOCK ends its blocking command at once.
// The loop may be just about to block (or not know its connection's id
// yet), so halt repeats the unblock until the loop has ended, for up to
// five seconds. If the server refuses it (an ACL without CLIENT), the loop
// ends when its block times out, or when Client.Close closes the
// connections.
func (h *hub) halt(r *runner) {
	r.mu.Lock()
	r.stop = true
	for t := range r.timers {
		t.Stop()
	}
	clear(r.timers)
	r.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		id := r.id
		r.mu.Unlock()
		if id != 0 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := h.c.rdb.ClientUnblock(ctx, id).Err()
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return // refused, or the client is closed: leave it to the block timeout or Close
			}
		}
		select {
		case <-r.done:
			return
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return
		}
	}
}

func (r *runner) stopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stop
}

// loop blocks on the marker until r is stopped.
func (h *hub) loop(r *runner) {
	defer close(r.done)
	ctx := context.Background()
	var conn *goredis.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close()
		}
	}()
	retry := 0
	for !r.stopped() {
		if conn == nil {
			conn = h.c.rdb.Conn()
			id, err := conn.ClientID(ctx).Result()
			r.mu.Lock()
			r.id = id
			r.mu.Unlock()
			if err != nil {
				_ = conn.Close()
				conn = nil
				retry = h.pause(r, retry)
				continue
			}
			if retry > 0 {
				// Puts while the connection was down left the marker set,
				// unless another process took it: let the subscribers look.
				h.signal()
				retry = 0
			}
		}
		z, err := conn.BZPopMin(ctx, h.c.o.blockTimeout, h.key).Result()
		if r.stopped() {
			return
		}
		switch {
		case errors.Is(err, goredis.Nil):
			// The block timed out: block again.
		case err != nil:
			_ = conn.Close()
			conn = nil
			retry = h.pause(r, retry)
		default:
			h.signal()
			if at := time.UnixMicro(int64(z.Score)); at.After(h.c.localNow().Add(time.Millisecond)) {
				h.later(r, at.Sub(h.c.localNow()))
			}
			time.Sleep(wakeCoalesce)
		}
	}
}

// later signals again after d: a delayed message becomes visible.
func (h *hub) later(r *runner, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stop {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		h.signal()
		r.mu.Lock()
		delete(r.timers, t)
		r.mu.Unlock()
	})
	r.timers[t] = struct{}{}
}

// pause waits before the retry'th reconnection (100 ms doubling to 10 s),
// returning early when r stops, and returns retry+1.
func (h *hub) pause(r *runner, retry int) int {
	d := min(100*time.Millisecond<<min(retry, 7), 10*time.Second)
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && !r.stopped() {
		time.Sleep(min(50*time.Millisecond, time.Until(deadline)))
	}
	return retry + 1
}
