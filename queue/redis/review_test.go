package redis_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/queuetest"
	"github.com/adaptq/adaptq/queue/redis"
)

// Adversarial review of the driver's resend and tombstone rules: each test
// tries to make a message come back, be stored twice, or be misreported.

// TestClearedMessageStaysGoneAfterALatePutSend: a put whose first send is
// late in the network, sent again and stored, then cleared by Clear, must
// not come back when the late send arrives: Clear returned with the queue
// empty, and the put had returned before Clear began.
func TestClearedMessageStaysGoneAfterALatePutSend(t *testing.T) {
	e := newResendEnv(t, "clearlate")
	ctx := context.Background()
	release, err := e.p.HoldRequests(1)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := e.q.Put(ctx, []byte("once"), queue.PutOptions{}); err != nil {
		t.Fatalf("Put, sent again after its first send was held: %v", err)
	}
	if n := e.p.Counts().HeldRequests; n != 1 {
		t.Fatalf("%d requests held, want the put's first send", n)
	}
	if err := e.direct.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	release() // the first send reaches the server now
	e.wantGone(t, "after Clear and the put's late first send")
}

// TestPutErrorAfterAnUnknownOutcomeIsTransient: once a send of a put failed
// in a way that leaves its outcome unknown (its connection failed after
// the request was written), Put must not answer with an error that says
// nothing was stored (a non-transient one): the first send may still act.
// Here the first send is held in the network, the send again meets a full
// server (OOM, not transient), and the first send then arrives.
func TestPutErrorAfterAnUnknownOutcomeIsTransient(t *testing.T) {
	s := startServer(t)
	p := queuetest.NewFaultProxy(t, s.Addr())
	prefix := testPrefix()
	ctx := context.Background()
	q, err := queue.Open(ctx, "redis://"+p.Addr()+"/0?queue=oom&prefix="+prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	direct, err := queue.Open(ctx, s.URL("oom", prefix, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	// Load the put script and leave a pooled connection behind the proxy.
	id := mustPut(t, q, "warm", queue.PutOptions{})
	ms, err := direct.Get(ctx, 1, time.Hour)
	if err != nil || len(ms) != 1 || ms[0].ID != id {
		t.Fatalf("warm-up Get = %v, %v", ms, err)
	}
	if err := direct.Delete(ctx, ms[0].ID, ms[0].PopReceipt); err != nil {
		t.Fatal(err)
	}

	release, err := p.HoldRequests(1)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := s.rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	_, perr := q.Put(ctx, []byte("once"), queue.PutOptions{})
	if err := s.rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if n := p.Counts().HeldRequests; n != 1 {
		t.Fatalf("%d requests held, want the put's first send", n)
	}
	if perr == nil {
		t.Fatal("Put succeeded on a server over its maxmemory")
	}
	release() // the first send reaches the server now, and stores the message
	n, err := direct.Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n > 0 && !queue.IsTransient(perr) {
		t.Errorf("Put = %v, not transient (nothing stored), but the queue holds %d message(s)", perr, n)
	}
}

// TestResentPutKeepsItsTTL: a put whose reply was lost and that is sent
// again after its message's TTL passed must not store the message again
// with a fresh TTL: the message would be returned past the TTL its put
// asked for and, as here where a consumer held it until it expired (its
// delete then finds it gone and leaves no tombstone), handled twice. The
// TTL passes on the server's clock (the scripts read it): a real wait of
// about a second.
func TestResentPutKeepsItsTTL(t *testing.T) {
	e := newResendEnv(t, "ttl")
	ctx := context.Background()
	release, err := e.p.HoldReplies()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	type result struct {
		id  string
		err error
	}
	done := make(chan result, 1)
	go func() {
		id, err := e.q.Put(ctx, []byte("short-lived"), queue.PutOptions{TTL: time.Second})
		done <- result{id, err}
	}()
	eventually(t, time.Minute, "the first send's reply is held", func() bool { return e.p.Counts().Held > 0 })
	m := e.getOne(t, "") // the first send stored it
	eventually(t, time.Minute, "the message's TTL passes", func() bool {
		n, err := e.direct.Count(ctx)
		return err == nil && n == 0
	})
	if err := e.direct.Delete(ctx, m.ID, m.PopReceipt); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Delete of a message past its TTL: %v, want ErrNotFound", err)
	}
	e.p.DropAll() // the reply is lost: the driver sends the put again
	release()
	r := <-done
	if r.err != nil && !queue.IsTransient(r.err) {
		t.Fatalf("Put = %v, want success or a transient error", r.err)
	}
	e.wantGone(t, "after the put was sent again past its message's TTL")
}

// TestDelayedPutSignalsWhenVisibleWhateverTheClientsClock: a put with an
// initial visibility delay signals again when the message becomes visible
// on the server's clock (the scripts decide visibility by it), whether the
// subscriber's clock runs ahead of it (the waker took the delayed marker
// for one already due, set no timer, and the message waited for the block
// timeout, 5 min by default) or behind it (the timer fired a minute late).
func TestDelayedPutSignalsWhenVisibleWhateverTheClientsClock(t *testing.T) {
	for _, tc := range []struct {
		skew    time.Duration
		stepped bool // the clock steps after the waker connected
	}{{time.Minute, false}, {-time.Minute, false}, {time.Minute, true}, {-time.Minute, true}} {
		name := tc.skew.String()
		if tc.stepped {
			name = "stepped" + name
		}
		t.Run(name, func(t *testing.T) {
			skew := tc.skew
			if !tc.stepped {
				redis.SetSkew(skew)
			}
			defer redis.SetSkew(0)
			c, prefix := newClient(t)
			q := mustQueue(t, c, "skewed")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s, err := q.Subscribe(ctx)
			if err != nil {
				t.Fatal(err)
			}
			producer := mustQueue(t, otherProcess(t, prefix), "skewed")
			if tc.stepped {
				mustPut(t, producer, "now", queue.PutOptions{}) // the waker connected and blocks
				wait(t, s, "the first put")
				redis.SetSkew(skew)
			}
			mustPut(t, producer, "later", queue.PutOptions{InitialVisibilityDelay: 1500 * time.Millisecond})
			wait(t, s, "the put")
			wait(t, s, "the end of the delay")
		})
	}
}

// TestBodiesComeBackByteForByte: bodies of every byte value, empty ones,
// ones that look like the protocol (CRLF, a RESP reply) and the largest
// the client accepts (here 2 MiB: WithMaxBodySize) come back unchanged from
// Get and Peek, through a proxy that loses the put's first reply (the put
// is sent again, body and all) and the get's (the get is not).
func TestBodiesComeBackByteForByte(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	big := make([]byte, 2<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	bodies := map[string][]byte{
		"empty": {},
		"bytes": all,
		"resp":  []byte("*2\r\n$1\r\na\r\n-ERR x\r\n\x00"),
		"big":   big,
	}
	c, prefix := newClient(t, redis.WithMaxBodySize(len(big)))
	opt, err := goredis.ParseURL(serverURL())
	if err != nil {
		t.Fatal(err)
	}
	p := queuetest.NewFaultProxy(t, opt.Addr)
	popt := *opt
	popt.Addr, popt.MaxRetries = p.Addr(), -1
	rdb := goredis.NewClient(&popt)
	defer rdb.Close()
	pc := redis.New(rdb, redis.WithKeyPrefix(prefix), redis.WithMaxBodySize(len(big)))
	defer pc.Close()
	ctx := context.Background()
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			q := mustQueue(t, pc, "body-"+name)
			direct := mustQueue(t, c, "body-"+name)
			if _, err := q.Count(ctx); err != nil { // a pooled connection, the scripts loaded
				t.Fatal(err)
			}
			lost := p.Counts().Lost
			p.LoseReplies(1)
			id, err := q.Put(ctx, body, queue.PutOptions{})
			p.LoseReplies(0)
			if p.Counts().Lost != lost+1 {
				t.Fatalf("the proxy lost %d replies, want the put's first", p.Counts().Lost-lost)
			}
			if err != nil {
				t.Fatalf("Put with its first reply lost: %v", err)
			}
			if n, err := direct.Count(ctx); err != nil || n != 1 {
				t.Fatalf("Count = %d, %v; want 1", n, err)
			}
			pk, err := q.Peek(ctx, 1)
			if err != nil || len(pk) != 1 || pk[0].ID != id || !bytes.Equal(pk[0].Body, body) {
				t.Fatalf("Peek = %d messages, %v; body changed: %v", len(pk), err, len(pk) == 1 && !bytes.Equal(pk[0].Body, body))
			}
			ms, err := q.Get(ctx, 1, time.Hour)
			if err != nil || len(ms) != 1 || !bytes.Equal(ms[0].Body, body) || ms[0].DequeueCount != 1 {
				t.Fatalf("Get = %d messages, %v", len(ms), err)
			}
			if err := q.Delete(ctx, ms[0].ID, ms[0].PopReceipt); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRestartWithoutPersistence: a server without persistence restarts
// empty (the driver promises no more, Durability ServerMemory) under a
// queue opened by URL with a subscriber: the receipt of a message held
// before finds ErrNotFound, the first call after the restart is at worst
// transient, puts work again (their scripts loaded anew), and the waker
// reconnects so that a put wakes the subscriber.
func TestRestartWithoutPersistence(t *testing.T) {
	s := startServer(t)
	prefix := testPrefix()
	ctx := context.Background()
	q, err := queue.Open(ctx, s.URL("restart", prefix, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub, err := q.Subscribe(sctx)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, q, "before", queue.PutOptions{})
	wait(t, sub, "the put before the restart")
	ms, err := q.Get(ctx, 1, time.Hour)
	if err != nil || len(ms) != 1 {
		t.Fatalf("Get = %d messages, %v", len(ms), err)
	}
	s.Restart()
	// The pooled connections are dead: the first call may say so, transiently.
	err = q.Delete(ctx, ms[0].ID, ms[0].PopReceipt)
	if err != nil && queue.IsTransient(err) {
		err = q.Delete(ctx, ms[0].ID, ms[0].PopReceipt)
	}
	if !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Delete after a restart that lost the message: %v, want ErrNotFound", err)
	}
	// Drain signals from before and of the reconnection.
	for drained := false; !drained; {
		select {
		case <-sub:
		default:
			drained = true
		}
	}
	id, err := q.Put(ctx, []byte("after"), queue.PutOptions{})
	if err != nil {
		t.Fatalf("Put after the restart: %v", err)
	}
	wait(t, sub, "the put after the restart")
	ms, err = q.Get(ctx, 32, time.Hour)
	if err != nil || len(ms) != 1 || ms[0].ID != id || ms[0].DequeueCount != 1 {
		t.Fatalf("Get after the restart = %v, %v; want the one message %s", ms, err, id)
	}
}

// TestDelayedPutsKeepBoundedTimers: every delayed put that the waker pops
// on its own left a timer to signal its message visible, so a stream of
// delayed puts (retries with backoff) held one timer per put until its
// delay ended: 500 puts a second with a one-hour delay, 1.8 million timers.
// The waker keeps at most MaxWakeTimers per queue, the earliest, and the
// later messages are left to the listener's safety interval, as are
// delayed puts whose markers merged.
func TestDelayedPutsKeepBoundedTimers(t *testing.T) {
	c, prefix := newClient(t)
	q := mustQueue(t, c, "timers")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub, err := q.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	producer := mustQueue(t, otherProcess(t, prefix), "timers")
	n := redis.MaxWakeTimers + 20
	for i := range n {
		// Each put waits for its signal, so the waker pops each marker.
		mustPut(t, producer, "later", queue.PutOptions{InitialVisibilityDelay: time.Hour - time.Duration(i)*time.Second})
		wait(t, sub, "a delayed put")
	}
	if got := redis.WakeTimers(c); got > redis.MaxWakeTimers {
		t.Fatalf("the waker keeps %d timers for %d delayed puts to one queue, want at most %d", got, n, redis.MaxWakeTimers)
	}
}

// TestWakerServesAUserWithoutTIME: a user whose ACL refuses TIME (the
// waker's measure of the server's clock) is still woken by a put, its waker
// blocking (no reconnections): it then times delayed signals on the
// process's clock.
func TestWakerServesAUserWithoutTIME(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	if err := s.rdb.Do(ctx, "ACL", "SETUSER", "notime", "on", ">notime-pw", "~*", "&*", "+@all", "-time").Err(); err != nil {
		t.Fatal(err)
	}
	t.Setenv(redis.PasswordEnv, "notime-pw")
	prefix := testPrefix()
	q, err := queue.Open(ctx, "redis://notime@"+s.Addr()+"/0?queue=notime&prefix="+prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var rc *redis.Client
	if !q.As(&rc) {
		t.Fatal("no *redis.Client")
	}
	if err := rc.Redis().Time(ctx).Err(); err == nil {
		t.Fatal("the user may run TIME")
	}
	pauses := make(chan time.Duration, 100)
	redis.OnWakerPause(rc, func(d time.Duration) {
		select {
		case pauses <- d:
		default:
		}
	})
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub, err := q.Subscribe(sctx)
	if err != nil {
		t.Fatal(err)
	}
	other := mustQueue(t, redis.New(s.rdb, redis.WithKeyPrefix(prefix)), "notime")
	mustPut(t, other, "x", queue.PutOptions{})
	wait(t, sub, "a put")
	if len(pauses) > 0 {
		t.Errorf("the waker reconnected %d times: it cannot block", len(pauses))
	}
}

// TestURLUserWithoutAPasswordIsRefused: a URL that names a user, with no
// password in the environment, must not connect as another user: go-redis
// authenticates only with a password, so the connection was the default
// user's, with the default user's rights.
func TestURLUserWithoutAPasswordIsRefused(t *testing.T) {
	t.Setenv(redis.PasswordEnv, "")
	opt, err := goredis.ParseURL(serverURL())
	if err != nil {
		t.Fatal(err)
	}
	server(t, testPrefix()) // skips without a server
	q, err := queue.Open(context.Background(), "redis://worker@"+opt.Addr+"/0?queue=users&prefix="+testPrefix())
	if err == nil {
		var rc *redis.Client
		q.As(&rc)
		who, _ := rc.Redis().Do(context.Background(), "ACL", "WHOAMI").Result()
		_ = q.Close()
		t.Fatalf("Open of a URL naming user worker, with no password, connected (as %v)", who)
	}
	if !errors.Is(err, queue.ErrInvalidURL) || !strings.Contains(err.Error(), `"worker"`) || !strings.Contains(err.Error(), redis.PasswordEnv) {
		t.Fatalf("Open = %v, want ErrInvalidURL naming the user and %s", err, redis.PasswordEnv)
	}
}
