package listener_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
)

// TestCallgrindDrain is not a test but the workload of a count of
// instructions per message under valgrind (bench/throughput.md, issue 34),
// skipped unless ADAPTQ_DRAIN_SIDE is set: it fills a memory queue with
// ADAPTQ_DRAIN_N messages of 49 bytes from one goroutine, then drains it
// with nothing (fill), plainLoop (raw), or a listener with default options
// but Tasks and Concurrency 48 per task (listener), with ADAPTQ_DRAIN_TASKS
// tasks (default 1). Under valgrind every handler runs some fifty times
// slower, which would turn the listener's inline dispatch (what a no-op
// handler gets outside valgrind) into a parallel one, and spill inline
// batches after stallAfter; the workload holds them inline, unspilled. Per message: (side's count − fill's count) / n.
//
//	go test -c -o /tmp/l.test ./listener
//	ADAPTQ_DRAIN_SIDE=listener ADAPTQ_DRAIN_N=200000 GODEBUG=asyncpreemptoff=1 \
//	  valgrind --tool=callgrind /tmp/l.test -test.run TestCallgrindDrain
func TestCallgrindDrain(t *testing.T) {
	side := os.Getenv("ADAPTQ_DRAIN_SIDE")
	if side == "" {
		t.Skip("a workload for callgrind: set ADAPTQ_DRAIN_SIDE to fill, raw or listener")
	}
	n, _ := strconv.Atoi(os.Getenv("ADAPTQ_DRAIN_N"))
	if n <= 0 {
		n = 200_000
	}
	tasks, _ := strconv.Atoi(os.Getenv("ADAPTQ_DRAIN_TASKS"))
	if tasks <= 0 {
		tasks = 1
	}
	ctx := context.Background()
	q, err := memory.NewStore().Queue("drain")
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 49)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	for range n {
		if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	switch side {
	case "fill":
	case "raw":
		if err := plainLoop(q, tasks, noop); err != nil {
			t.Fatal(err)
		}
	case "listener":
		defer listener.SetSequentialBelow(listener.SetSequentialBelow(time.Second))
		defer listener.SetStallAfter(listener.SetStallAfter(time.Minute))
		l, err := listener.New(q, noop, listener.Options{Tasks: tasks, Concurrency: tasks * 48})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		if err := l.Start(rctx, tasks); err != nil {
			t.Fatal(err)
		}
		for l.Stats().Deleted < int64(n) {
			time.Sleep(time.Millisecond)
		}
		cancel()
		if err := l.Wait(); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("ADAPTQ_DRAIN_SIDE=%q: want fill, raw or listener", side)
	}
	if c, err := q.Count(ctx); err != nil || c != 0 && side != "fill" {
		t.Fatalf("%d messages left (%v)", c, err)
	}
}
