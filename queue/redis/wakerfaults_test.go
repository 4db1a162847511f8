package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/queuetest"
	"github.com/adaptq/adaptq/queue/redis"
)

// clientIDs records the replies to CLIENT ID a go-redis client receives:
// the ids of the waker's connections.
type clientIDs struct {
	mu  sync.Mutex
	ids []int64
}

func (c *clientIDs) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (c *clientIDs) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		a := cmd.Args()
		if ic, ok := cmd.(*goredis.IntCmd); ok && err == nil && len(a) == 2 && strings.EqualFold(cmd.Name(), "client") && strings.EqualFold(fmt.Sprint(a[1]), "id") {
			c.mu.Lock()
			c.ids = append(c.ids, ic.Val())
			c.mu.Unlock()
		}
		return err
	}
}

func (c *clientIDs) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// waitBlocked waits until the server shows the newest connection in ids
// blocked in BZPOPMIN: a fault armed now lands on no request of it, and a
// put now is popped by it.
func waitBlocked(t *testing.T, admin *goredis.Client, ids *clientIDs, what string) {
	t.Helper()
	testutil.Eventually(t, time.Minute, what, func() bool {
		id := ids.last()
		if id == 0 {
			return false
		}
		l, err := admin.Do(context.Background(), "CLIENT", "LIST", "ID", id).Text()
		return err == nil && strings.Contains(l, "cmd=bzpopmin") && strings.Contains(l, "flags=b")
	})
}

func (c *clientIDs) last() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ids) == 0 {
		return 0
	}
	return c.ids[len(c.ids)-1]
}

// TestWakerSurvivesDroppedConnections: the subscribers' waker, reached
// through the fault proxy, keeps waking subscribers after its connections
// fail. Its block timeout is ten minutes, far beyond every wait here, so
// that only the waker's own recovery can wake them, never a block that
// timed out.
//
//   - Its blocking connection dropped (three times): it connects again,
//     signals every subscriber (a put may have come meanwhile), and a put
//     afterwards wakes the subscriber.
//   - The CLIENT UNBLOCK that makes it block on a new queue's marker too
//     fails on a dropped request (once, then three times in a row): it
//     sends it again, and a put to the new queue wakes its subscriber.
//     (Review of issue 25: the unblock gave up on any error but a
//     timeout, and the new queue waited for the block timeout.)
func TestWakerSurvivesDroppedConnections(t *testing.T) {
	c, prefix := newClient(t)
	opt, err := goredis.ParseURL(serverURL())
	if err != nil {
		t.Fatal(err)
	}
	p := queuetest.NewFaultProxy(t, opt.Addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func(name string) *queue.Queue {
		q, err := queue.Open(ctx, "redis://"+p.Addr()+"/"+strconv.Itoa(opt.DB)+"?queue="+name+"&prefix="+prefix+"&block_timeout=10m")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = q.Close() })
		return q
	}
	subscribe := func(q *queue.Queue) <-chan struct{} {
		s, err := q.Subscribe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := open("wake-a")
	var shared *goredis.Client
	a.As(&shared)
	ids := &clientIDs{}
	shared.AddHook(ids)
	blocked := func(what string) { waitBlocked(t, c.Redis(), ids, what) }
	sa := subscribe(a)
	producerA := mustQueue(t, c, "wake-a")
	mustPut(t, producerA, "first", queue.PutOptions{})
	wait(t, sa, "the first put")

	for round := range 3 {
		before := p.Counts().Drops
		p.DropAll()
		if p.Counts().Drops != before+1 {
			t.Fatal("the drop did not land")
		}
		wait(t, sa, "the waker's signal after it connected again, round "+strconv.Itoa(round))
		mustPut(t, producerA, "after the drop", queue.PutOptions{})
		wait(t, sa, "a put after the waker's connection was dropped, round "+strconv.Itoa(round))
	}

	// A new queue's subscriber: the waker must stop blocking on wa alone.
	// The proxy drops the next requests: the CLIENT UNBLOCK's, or its new
	// connection's first.
	for i, drops := range []int{1, 3} {
		name := "wake-b" + strconv.Itoa(i)
		q := open(name)
		blocked("the waker blocks")
		p.DropRequests(drops)
		s := subscribe(q)
		mustPut(t, mustQueue(t, c, name), "to the new queue", queue.PutOptions{})
		wait(t, s, "a put to a queue subscribed while "+strconv.Itoa(drops)+" unblocks failed")
		if fc := p.Counts(); fc.ArmedLeft != 0 {
			t.Errorf("the %d dropped requests did not all land: %+v", drops, fc)
		}
		p.DropRequests(0)
	}
}

// TestWakerBacksOffWhenEveryBlockFails: a server that accepts the waker's
// connection but fails every block (here a marker key of another type)
// gets reconnections that back off (100 ms doubling), not one every
// 100 ms each followed by a signal to every subscriber; once the key is
// right again a put wakes the subscriber. (Review of issue 25: a
// successful CLIENT ID reset the backoff.)
func TestWakerBacksOffWhenEveryBlockFails(t *testing.T) {
	c, prefix := newClient(t)
	pauses := make(chan time.Duration, 100)
	redis.OnWakerPause(c, func(d time.Duration) {
		select {
		case pauses <- d:
		default:
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	marker := prefix + "{backoff}:w"
	if err := c.Redis().Set(ctx, marker, "not a sorted set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	ids := &clientIDs{}
	c.Redis().AddHook(ids)
	q := mustQueue(t, c, "backoff")
	s, err := q.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []time.Duration
	for len(got) < 4 {
		select {
		case d := <-pauses:
			got = append(got, d)
		case <-time.After(time.Minute):
			t.Fatalf("pauses %v: the waker stopped reconnecting", got)
		}
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("the waker's pauses before reconnecting: %v, want them growing", got)
		}
	}
	if err := c.Redis().Del(ctx, marker).Err(); err != nil {
		t.Fatal(err)
	}
	waitBlocked(t, c.Redis(), ids, "the waker blocks once the marker is a sorted set")
	for len(s) > 0 { // the reconnections' signals
		<-s
	}
	mustPut(t, q, "after the fix", queue.PutOptions{})
	wait(t, s, "a put once the marker is a sorted set again")
}
