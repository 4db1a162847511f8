package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/queue/queuetest"
)

// TestFaultProxy drains 3,000 messages with the adaptive listener while the
// shared fault proxy (queuetest.FaultProxy) breaks the network under both
// it and the producer, which open the queue by URL through the proxy.
// Faults are counted in the producer's puts, never by a clock, so a slow
// machine slows the test but cannot starve it: every 100th put drops every
// connection, every 250th loses the next reply after the server acted,
// and every 500th refuses new connections until three puts have failed.
// Messages hidden by a get whose reply was lost come back after their
// visibility timeout, when nothing wakes a listener: it polls at its
// safety interval (10 s here, 5 min by default). No message is lost, every
// error that reached the queue is transient, and once the faults stop a
// put wakes the idle listener through native notify (a trigger, not its
// poll), so the blocking connection came back after every fault.
func TestFaultProxy(t *testing.T) {
	c, prefix := newClient(t)
	direct := mustQueue(t, c, "faults")
	opt, err := goredis.ParseURL(serverURL())
	if err != nil {
		t.Fatal(err)
	}
	p := queuetest.NewFaultProxy(t, opt.Addr)
	m := meter.New(0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q, err := queue.Open(ctx, "redis://"+p.Addr()+"/"+strconv.Itoa(opt.DB)+"?queue=faults&prefix="+prefix, queue.WithObserver(m))
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
	l, err := nativeListenerPolling(ctx, q, handle, 3*time.Second, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- l.Run(ctx) }()

	const (
		puts        = 3000
		dropEvery   = 100
		loseEvery   = 250
		refuseEvery = 500
		refusedPuts = 3
	)
	ids := map[string]bool{}
	refusing := 0 // failed puts still to refuse
	for i := range puts {
		switch {
		case i > 0 && i%refuseEvery == 0:
			p.Refuse(true)
			p.DropAll()
			refusing = refusedPuts
		case i > 0 && i%loseEvery == 0:
			p.LoseReplies(1)
		case i > 0 && i%dropEvery == 0:
			p.DropAll()
		}
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
			if refusing > 0 {
				if refusing--; refusing == 0 {
					p.Refuse(false)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		if refusing > 0 { // the put found a pooled connection: refuse no longer
			refusing = 0
			p.Refuse(false)
		}
	}
	p.Refuse(false)
	p.LoseReplies(0)
	eventually(t, 3*time.Minute, "every acknowledged put handled", func() bool { return h.covers(ids) })

	// The faults are over: the drain ends, and a put wakes the idle
	// listener through its (re-established) blocking connection.
	eventually(t, 2*time.Minute, "the queue is empty", func() bool {
		n, err := direct.Count(context.Background())
		return err == nil && n == 0
	})
	triggers := l.Stats().Triggers
	last := mustPut(t, direct, "after-the-faults", queue.PutOptions{})
	eventually(t, time.Minute, "a put after the faults is handled", func() bool { return h.covers(map[string]bool{last: true}) })
	if l.Stats().Triggers == triggers {
		t.Error("the put after the faults was handled by the listener's poll: native notify did not wake it")
	}
	cancel()
	if err := <-exited; err != nil {
		t.Fatalf("listener: %v", err)
	}

	s := m.Snapshot()
	fc := p.Counts()
	t.Logf("proxy %+v; meter %v, errors %d (transient %d); listener %+v", fc, s.Map(), s.TotalErrors(), s.Transient, l.Stats())
	for _, err := range permanent {
		t.Errorf("a put failed with an error not classified transient: %v", err)
	}
	if fc.Drops == 0 || fc.Lost == 0 || fc.Refused == 0 {
		t.Errorf("a kind of fault never landed: %+v", fc)
	}
	if s.TotalErrors() == 0 {
		t.Error("no call failed: the proxy injected no fault that reached the queue")
	}
	if s.TotalErrors() != s.Transient {
		t.Errorf("%d errors, %d of them transient: every fault here is transient", s.TotalErrors(), s.Transient)
	}
}
