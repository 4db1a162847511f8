package listener_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
)

// The listener's steady state allocates nothing per message beyond what
// the hand-written loop does (issue 34): a drain of a backlog through a
// default listener with a no-op handler costs, per message, the same
// allocations as plainLoop draining the same backlog, give or take a few
// per run (a trigger's timer, an idle sleep). An allocation per message
// (a handler context's value, a closure, a boxed interface) shows as +1
// per message, one per batch as +1/32. Allocation counts, not timings.
func TestListenerAllocatesNoMoreThanThePlainLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("drains 3,200 messages a run")
	}
	if raceEnabled {
		t.Skip("-race: handlers slow enough to run in parallel, whose allocations this does not count")
	}
	// Per message of a run; a batch's allocation would be 1/32 ≈ 0.031.
	const perMessage = 0.02
	for _, tasks := range []int{1, 4} {
		t.Run(fmt.Sprintf("tasks=%d", tasks), func(t *testing.T) {
			plain, lis := drainAllocs(t, tasks)
			t.Logf("allocations per message: plain loop %.3f, listener %.3f", plain, lis)
			if lis-plain > perMessage {
				t.Errorf("the listener allocates %.3f per message more than the plain loop (%.3f vs %.3f); want at most %.2f",
					lis-plain, lis, plain, perMessage)
			}
		})
	}
}

// drainAllocs returns the allocations per message of filling and draining
// a backlog, with plainLoop and with a listener of tasks tasks.
func drainAllocs(t *testing.T, tasks int) (plain, lis float64) {
	t.Helper()
	const n = 100 * queue.MaxBatchSize
	body := []byte("a small message body of about fifty bytes .......")
	ctx := context.Background()
	fill := func(q *queue.Queue) {
		for range n {
			if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	pq, err := memory.NewStore().Queue("plain")
	if err != nil {
		t.Fatal(err)
	}
	plain = testing.AllocsPerRun(3, func() {
		fill(pq)
		if err := plainLoop(pq, tasks, noop); err != nil {
			t.Fatal(err)
		}
	}) / n

	lq, err := memory.NewStore().Queue("listener")
	if err != nil {
		t.Fatal(err)
	}
	l, err := listener.New(lq, noop, listener.Options{Tasks: tasks, Concurrency: tasks * 48})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		if err := l.Wait(); err != nil {
			t.Error(err)
		}
	}()
	if err := l.Start(rctx, tasks); err != nil {
		t.Fatal(err)
	}
	var want int64
	drain := func() {
		fill(lq)
		want += n
		l.Wake()
		for l.Stats().Deleted < want {
			runtime.Gosched()
		}
	}
	// Inline dispatch, as a no-op handler gets on a quiet machine, however
	// busy this one is; and the first batch runs in parallel (the
	// handler's speed is unknown until it has run): warm up before
	// counting.
	defer listener.SetSequentialBelow(listener.SetSequentialBelow(time.Second))
	defer listener.SetStallAfter(listener.SetStallAfter(time.Minute)) // a descheduled task spills nothing
	drain()
	lis = testing.AllocsPerRun(3, drain) / n
	return plain, lis
}
