package redis_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/queuetest"
	"github.com/adaptq/adaptq/queue/redis"
)

// resendEnv is a queue opened by URL through a fault proxy (the one whose
// Put sends again) and the same queue of a client that bypasses it (the
// consumer).
type resendEnv struct {
	p      *queuetest.FaultProxy
	q      *queue.Queue
	direct *queue.Queue
	rdb    *goredis.Client
	keys   string // the queue's keys' start
}

func newResendEnv(t *testing.T, name string) *resendEnv {
	t.Helper()
	c, prefix := newClient(t)
	opt, err := goredis.ParseURL(serverURL())
	if err != nil {
		t.Fatal(err)
	}
	p := queuetest.NewFaultProxy(t, opt.Addr)
	ctx := context.Background()
	q, err := queue.Open(ctx, "redis://"+p.Addr()+"/"+strconv.Itoa(opt.DB)+"?queue="+name+"&prefix="+prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	e := &resendEnv{p: p, q: q, direct: mustQueue(t, c, name), rdb: c.Redis(), keys: prefix + "{" + name + "}:"}
	// Load the scripts (a NOSCRIPT answer would be the reply a fault
	// lands on, before the server acted) and leave a pooled connection
	// behind the proxy, so that the put's first send is on it.
	m := e.getOne(t, mustPut(t, e.direct, "warm", queue.PutOptions{}))
	if err := e.direct.Delete(ctx, m.ID, m.PopReceipt); err != nil {
		t.Fatal(err)
	}
	if n, err := e.q.Count(ctx); err != nil || n != 0 {
		t.Fatalf("Count = %d, %v", n, err)
	}
	return e
}

// getOne gets the one visible message, which must be id, for an hour.
func (e *resendEnv) getOne(t *testing.T, id string) *queue.Message {
	t.Helper()
	ms, err := e.direct.Get(context.Background(), 10, time.Hour)
	if err != nil || len(ms) != 1 || (id != "" && ms[0].ID != id) {
		t.Fatalf("Get = %d messages, %v; want the one message %s", len(ms), err, id)
	}
	return ms[0]
}

// wantGone checks that the queue holds no message and has none to give.
func (e *resendEnv) wantGone(t *testing.T, what string) {
	t.Helper()
	ctx := context.Background()
	if n, err := e.direct.Count(ctx); err != nil || n != 0 {
		t.Errorf("%s: the queue holds %d messages (%v), want 0", what, n, err)
	}
	if ms, err := e.direct.Get(ctx, 10, time.Hour); err != nil || len(ms) != 0 {
		t.Errorf("%s: Get = %d messages (%v), want none: handled twice", what, len(ms), err)
	}
}

// TestResentPutDoesNotResurrect: a put whose first send stored the message
// and whose reply was lost, sent again after a consumer got and deleted
// the message, must not store it again (it would be handled twice). The
// proxy holds the first send's reply while the consumer works, then drops
// the connection, so the driver sends the put again.
func TestResentPutDoesNotResurrect(t *testing.T) {
	e := newResendEnv(t, "resurrect")
	ctx := context.Background()
	release, err := e.p.HoldReplies()
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		id  string
		err error
	}
	done := make(chan result, 1)
	go func() {
		id, err := e.q.Put(ctx, []byte("once"), queue.PutOptions{})
		done <- result{id, err}
	}()
	eventually(t, time.Minute, "the first send's reply is held", func() bool { return e.p.Counts().Held > 0 })
	m := e.getOne(t, "") // the server stored it
	if err := e.direct.Delete(ctx, m.ID, m.PopReceipt); err != nil {
		t.Fatal(err)
	}
	e.p.DropAll() // the reply is lost: the driver sends the put again
	release()
	r := <-done
	if r.err != nil && !queue.IsTransient(r.err) {
		t.Fatalf("Put = %v, want success or a transient error", r.err)
	}
	if r.err == nil && r.id != m.ID {
		t.Errorf("Put returned id %s; the message it stored was %s", r.id, m.ID)
	}
	e.wantGone(t, "after the put was sent again")
	e.wantTombstones(t, 2) // the warm-up's and this put's
}

// wantTombstones checks the queue keeps n tombstones, in sets Redis
// expires within the driver's tombstone life.
func (e *resendEnv) wantTombstones(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	keys, err := e.rdb.Keys(ctx, e.keys+"t:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, k := range keys {
		m, err := e.rdb.SCard(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		got += int(m)
		d, err := e.rdb.PTTL(ctx, k).Result()
		if err != nil || d <= 0 || d > redis.TombstoneLife {
			t.Errorf("tombstone set %s expires in %v (%v), want within %v", k, d, err, redis.TombstoneLife)
		}
	}
	if got != n {
		t.Errorf("%d tombstones in %v, want %d", got, keys, n)
	}
}

// TestLateFirstPutSend: a put's first send that reaches the server late,
// after the driver sent the put again, that send stored the message and a
// consumer got it, changes nothing: the message stays hidden under the
// consumer's receipt with its dequeue count, or, deleted, stays gone.
func TestLateFirstPutSend(t *testing.T) {
	for _, how := range []string{"held", "deleted", "batch-deleted"} {
		deleted := how != "held"
		t.Run(how, func(t *testing.T) {
			e := newResendEnv(t, "late")
			ctx := context.Background()
			release, err := e.p.HoldRequests(1)
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			id, err := e.q.Put(ctx, []byte("once"), queue.PutOptions{})
			if err != nil {
				t.Fatalf("Put, sent again after its first send was held: %v", err)
			}
			if n := e.p.Counts().HeldRequests; n != 1 {
				t.Fatalf("%d requests held, want the put's first send", n)
			}
			m := e.getOne(t, id)
			switch how {
			case "deleted":
				if err := e.direct.Delete(ctx, m.ID, m.PopReceipt); err != nil {
					t.Fatal(err)
				}
			case "batch-deleted":
				res, err := e.direct.DeleteBatch(ctx, []queue.Receipt{{ID: m.ID, PopReceipt: m.PopReceipt}})
				if err != nil || res[0] != nil {
					t.Fatalf("DeleteBatch = %v, %v", res, err)
				}
			}
			release() // the first send reaches the server now, and it acts on it
			if deleted {
				e.wantGone(t, "after the late first send")
				return
			}
			if ms, err := e.direct.Get(ctx, 10, time.Hour); err != nil || len(ms) != 0 {
				t.Fatalf("after the late first send Get = %d messages (%v): the held message became visible", len(ms), err)
			}
			if ms, err := e.direct.Peek(ctx, 10); err != nil || len(ms) != 0 {
				t.Fatalf("after the late first send Peek = %d messages (%v)", len(ms), err)
			}
			// The consumer's receipt still holds the message, whose dequeue
			// count is the get's.
			r, err := e.direct.UpdateVisibility(ctx, m.ID, m.PopReceipt, 0)
			if errors.Is(err, queue.ErrReceiptMismatch) || errors.Is(err, queue.ErrNotFound) {
				t.Fatalf("the consumer's receipt after the late first send: %v", err)
			} else if err != nil {
				t.Fatal(err)
			}
			_ = r
			again := e.getOne(t, id)
			if again.DequeueCount != m.DequeueCount+1 {
				t.Errorf("dequeue count %d after a second get, want %d", again.DequeueCount, m.DequeueCount+1)
			}
			if err := e.direct.Delete(ctx, again.ID, again.PopReceipt); err != nil {
				t.Fatal(err)
			}
			e.wantGone(t, "after the delete")
		})
	}
}

// TestPutSendsAgainOnlyWithinItsWindow: Put sends a put again only within
// its resend window of its first send, so that every send of it reaches
// the server while a tombstone would still stop it. Here every attempt
// finds the window past (the window's clock jumps), and the put is sent
// once: one request dropped, the other armed drops left.
func TestPutSendsAgainOnlyWithinItsWindow(t *testing.T) {
	e := newResendEnv(t, "window")
	start := time.Now()
	var calls int
	var c *redis.Client
	if !e.q.As(&c) {
		t.Fatal("the queue has no *redis.Client")
	}
	redis.SetMonoNow(c, func() time.Time {
		calls++
		if calls == 1 {
			return start
		}
		return start.Add(redis.PutResendWindow + time.Second)
	})
	e.p.DropRequests(redis.DefaultAttempts)
	_, err := e.q.Put(context.Background(), []byte("x"), queue.PutOptions{})
	e.p.DropRequests(0)
	if err == nil || !queue.IsTransient(err) {
		t.Fatalf("Put with its request dropped: %v, want a transient error", err)
	}
	if c := e.p.Counts(); c.Dropped != 1 {
		t.Errorf("the put was sent %d times (%+v), want once: its window was past", c.Dropped, c)
	}
	e.wantGone(t, "after a put whose request was dropped")
}
