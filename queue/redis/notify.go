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
// visible. In each process, the subscribers of every queue of a Client
// share one waker: one goroutine on one dedicated connection that blocks in
// BZPOPMIN on the markers of all the queues that have subscribers, for up
// to the block timeout, and signals the subscribers of the queue whose
// marker it popped. A put by any process therefore wakes an idle worker at
// once, an idle worker sends one command per block timeout and nothing
// else, and however many queues a process subscribes to it holds one
// connection for them (one per queue starved the shared pool: 22 queues on
// a 2-core host held all 20 of its connections, and Put timed out).
//
// When the set of queues with subscribers changes, the waker ends its
// blocking command with CLIENT UNBLOCK (repeated until the loop blocks on
// the new set) and blocks again. BZPOPMIN takes the first of its keys that
// holds a marker; the keys go in a random order each time (a map's), so a
// busy queue whose marker is always set does not starve the others.
//
// BZPOPMIN hands the marker to one of the processes blocked on it. The get
// script sets it again when it leaves visible messages behind, so a backlog
// wakes the other processes one after another. A marker whose score lies in
// the future (a put with an initial visibility delay) signals at once and
// again, by a timer, when the message becomes visible on the server's clock
// (which the waker reads on each new connection and counts on from with
// the process's monotonic clock, so that a process whose clock is skewed,
// or stepped later, is woken on time); puts that merged
// into one marker keep the earliest time, and the listener's safety
// interval covers the later ones.

// unblockPause is how long the waker's kicker waits before it sends CLIENT
// UNBLOCK again, when the loop was not blocked yet on the keys it had.
const unblockPause = 50 * time.Millisecond

// waker is the subscribers of a Client's queues and the loop that blocks
// for them. Every field is under mu.
type waker struct {
	c *Client

	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{} // by marker key
	gen  uint64                                // bumped when the set of keys changes
	run  *wakeRun                              // nil when no loop runs

	onPause func(time.Duration) // tests: called with each reconnection's pause

	// srvTime is the server's clock as the waker's connection last read it
	// (TIME, on each new connection), and srvAt the process's time.Now
	// then (the middle of the round trip, with its monotonic reading): a
	// delayed marker's time is the server's, and the timer that signals
	// its message visible counts from srvTime on the process's monotonic
	// clock, so neither a skewed process clock nor one stepped later moves
	// it. Zero until read, and with an injected clock, which both read.
	srvTime, srvAt time.Time
}

// wakeRun is one life of the waker's loop: started by the first
// subscriber, ended when none is left or the Client closes.
type wakeRun struct {
	done    chan struct{}
	stop    bool
	ended   bool
	id      int64                                // CLIENT ID of the blocking connection, 0 until known
	gen     uint64                               // the key set the loop blocks on
	kicking bool                                 // an unblock goroutine runs
	timers  map[string]map[*time.Timer]time.Time // by marker key: when each is due
}

// Subscribe returns a channel that receives soon after a message is put to
// the queue by any process, until ctx ends.
func (q *redisQueue) Subscribe(ctx context.Context) (<-chan struct{}, error) {
	w := &q.c.wake
	key := q.keys3[2]
	ch := make(chan struct{}, 1)
	if err := w.add(key, ch); err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, func() { w.remove(key, ch) })
	return ch, nil
}

func (w *waker) add(key string, ch chan struct{}) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.c.closed.Load() {
		return queue.ErrClosed
	}
	if w.subs == nil {
		w.subs = map[string]map[chan struct{}]struct{}{}
	}
	set, ok := w.subs[key]
	if !ok {
		set = map[chan struct{}]struct{}{}
		w.subs[key] = set
	}
	set[ch] = struct{}{}
	if !ok {
		w.changed()
	}
	return nil
}

func (w *waker) remove(key string, ch chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	set := w.subs[key]
	delete(set, ch)
	if len(set) == 0 && set != nil {
		delete(w.subs, key)
		w.changed()
	}
}

// changed starts the loop, or makes the running one block again on the
// keys of now. Called under mu.
func (w *waker) changed() {
	w.gen++
	switch {
	case w.run != nil:
		w.kick(w.run)
	case len(w.subs) > 0 && !w.c.closed.Load():
		r := &wakeRun{done: make(chan struct{}), timers: map[string]map[*time.Timer]time.Time{}}
		w.run = r
		go w.loop(r)
	}
}

// stop ends the loop, if one runs, and returns it (Client.Close waits for
// it).
func (w *waker) stop() *wakeRun {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.run
	if r == nil {
		return nil
	}
	w.run = nil
	r.stop = true
	w.gen++
	w.kick(r)
	return r
}

// kick starts a goroutine that sends CLIENT UNBLOCK to r's connection until
// r blocks on the newest key set or ends. Called under mu.
func (w *waker) kick(r *wakeRun) {
	if r.kicking || r.ended {
		return
	}
	r.kicking = true
	go w.unblock(r)
}

// unblock is kick's goroutine. The loop may be just about to block on the
// old keys (or not know its connection's id yet), so it repeats the
// unblock every unblockPause. A transient failure (a lost connection, a
// full pool) makes it send the unblock again, backing off up to 64 ×
// unblockPause: given up, it would leave the loop blocked on the old keys,
// and a new queue's subscribers unwoken, until the block timeout (review of
// issue 25). If the server refuses it (an ACL without CLIENT), or the
// Client is closed, it stops: the loop sees the new keys when its block
// times out, or ends when Client.Close closes the connections.
func (w *waker) unblock(r *wakeRun) {
	fails := 0
	for {
		w.mu.Lock()
		if r.ended || (!r.stop && r.gen == w.gen) {
			r.kicking = false
			w.mu.Unlock()
			return
		}
		id := r.id
		w.mu.Unlock()
		pause := unblockPause
		if id != 0 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := w.c.rdb.ClientUnblock(ctx, id).Err()
			cancel()
			switch t, _ := Classify(err); {
			case err == nil:
				fails = 0
			case t || errors.Is(err, context.DeadlineExceeded):
				fails++
				pause = unblockPause << min(fails, 6)
			default:
				w.mu.Lock()
				r.kicking = false
				w.mu.Unlock()
				return
			}
		}
		t := time.NewTimer(pause)
		select {
		case <-r.done:
			t.Stop()
		case <-t.C:
		}
	}
}

// keys returns the marker keys to block on and records their generation,
// or nil when r is to end (then marked ended). Called under mu.
func (w *waker) keys(r *wakeRun) []string {
	if r.stop || len(w.subs) == 0 {
		if w.run == r {
			w.run = nil
		}
		r.ended = true
		for _, ts := range r.timers {
			for t := range ts {
				t.Stop()
			}
		}
		clear(r.timers)
		return nil
	}
	keys := make([]string, 0, len(w.subs))
	for k := range w.subs { // a map's order: random each time
		keys = append(keys, k)
	}
	r.gen = w.gen
	return keys
}

// signal wakes every subscriber of the marker key (every subscriber when
// key is ""); a pending signal absorbs a new one.
func (w *waker) signal(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, set := range w.subs {
		if key != "" && k != key {
			continue
		}
		for ch := range set {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

func (w *waker) stopped(r *wakeRun) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return r.stop
}

// loop blocks on the markers until r ends.
func (w *waker) loop(r *wakeRun) {
	defer close(r.done)
	ctx := context.Background()
	var conn *goredis.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close()
		}
	}()
	retry := 0
	for {
		w.mu.Lock()
		keys := w.keys(r)
		w.mu.Unlock()
		if keys == nil {
			return
		}
		if conn == nil {
			conn = w.c.rdb.Conn()
			id, err := conn.ClientID(ctx).Result()
			w.mu.Lock()
			r.id = id
			w.mu.Unlock()
			if err == nil {
				// A server that refuses TIME (an ACL) leaves the last
				// reading, or none: the timers then run on the process's
				// clock.
				if merr := w.measure(ctx, conn); merr != nil {
					if t, _ := Classify(merr); t {
						err = merr
					}
				}
			}
			if err != nil {
				_ = conn.Close()
				conn = nil
				retry = w.pause(r, retry)
				continue
			}
			if retry > 0 {
				// Puts while the connection was down left their markers
				// set, unless another process took them: let every
				// subscriber look. retry stays until a block succeeds: a
				// server that accepts the connection but fails every block
				// (a marker key of another type, an ACL) gets the
				// reconnections backed off, not one every 100 ms.
				w.signal("")
			}
		}
		z, err := conn.BZPopMin(ctx, w.c.o.blockTimeout, keys...).Result()
		switch {
		case w.stopped(r):
			// Close: the top of the loop ends it.
		case errors.Is(err, goredis.Nil):
			// The block timed out, or CLIENT UNBLOCK ended it for a new set
			// of keys: block again.
			retry = 0
		case err != nil:
			_ = conn.Close()
			conn = nil
			w.mu.Lock()
			r.id = 0
			w.mu.Unlock()
			retry = w.pause(r, retry)
		default:
			retry = 0
			w.signal(z.Key)
			now := w.serverNow()
			if at := time.UnixMicro(int64(z.Score)); at.After(now.Add(time.Millisecond)) {
				w.later(r, z.Key, at.Sub(now))
			}
			time.Sleep(wakeCoalesce)
		}
	}
}

// measure reads the server's clock on conn (srvTime), unless the scripts
// read an injected clock.
func (w *waker) measure(ctx context.Context, conn *goredis.Conn) error {
	if w.c.o.clock != nil {
		return nil
	}
	t0 := time.Now()
	st, err := conn.Time(ctx).Result()
	if err != nil {
		return err
	}
	at := t0.Add(time.Since(t0) / 2)
	w.mu.Lock()
	w.srvTime, w.srvAt = st, at
	w.mu.Unlock()
	return nil
}

// serverNow is the best guess of the scripts' clock: the server's last
// reading plus the monotonic time since, or the process's clock before
// any.
func (w *waker) serverNow() time.Time {
	w.mu.Lock()
	st, at := w.srvTime, w.srvAt
	w.mu.Unlock()
	if st.IsZero() {
		return w.c.localNow()
	}
	return st.Add(time.Since(at))
}

// maxWakeTimers is the most timers the waker keeps per queue to signal
// delayed messages visible: the earliest. Each delayed put it pops on its
// own leaves one until the put's delay ends, so a stream of delayed puts
// (retries with backoff) held one timer per put, without bound (review of
// issue 25: 500 puts a second with a one-hour delay, 1.8 million). A later
// message's signal is then the listener's safety interval, as for delayed
// puts whose markers merged.
const maxWakeTimers = 64

// later signals key's subscribers again after d: a delayed message becomes
// visible. Called with the queue's maxWakeTimers kept, it keeps the
// earliest.
func (w *waker) later(r *wakeRun, key string, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.ended || r.stop {
		return
	}
	at := time.Now().Add(d)
	ts := r.timers[key]
	if ts == nil {
		ts = map[*time.Timer]time.Time{}
		r.timers[key] = ts
	}
	if len(ts) >= maxWakeTimers {
		var last *time.Timer
		var lastAt time.Time
		for t, a := range ts {
			if last == nil || a.After(lastAt) {
				last, lastAt = t, a
			}
		}
		if !at.Before(lastAt) {
			return
		}
		last.Stop()
		delete(ts, last)
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		w.signal(key)
		w.mu.Lock()
		if ts := r.timers[key]; ts != nil {
			delete(ts, t)
			if len(ts) == 0 {
				delete(r.timers, key)
			}
		}
		w.mu.Unlock()
	})
	ts[t] = at
}

// pause waits before the retry'th reconnection (100 ms doubling to 10 s),
// returning early when r stops, and returns retry+1.
func (w *waker) pause(r *wakeRun, retry int) int {
	d := min(100*time.Millisecond<<min(retry, 7), 10*time.Second)
	if w.onPause != nil {
		w.onPause(d)
	}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && !w.stopped(r) {
		time.Sleep(min(50*time.Millisecond, time.Until(deadline)))
	}
	return retry + 1
}
