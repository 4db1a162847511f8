package listener

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/scaling"
)

// children is how many child contexts are registered on ctx (a
// *context.cancelCtx): contexts made from it and never cancelled.
func children(ctx context.Context) int {
	return reflect.ValueOf(ctx).Elem().FieldByName("children").Len()
}

// Review of issue 11: a task that stops by Resize, by the idle rule or in
// its error backoff (loop's counted=false paths) never cancels the handler
// context it keeps for its inline batches, so each such stop leaves one
// child on the run's abort context until Abort or Wait. A scaling agent
// that grows and shrinks the pool all day grows the map without bound.
func TestReviewStoppedTasksLeakTheirHandlerContext(t *testing.T) {
	q, err := memory.NewStore().Queue("leak")
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, *queue.Message) error { return nil }
	l, err := New(q, h, Options{Tasks: 4, MaxTasks: 4, BatchSize: 1,
		Idle: scaling.IdleBackoff{Min: time.Millisecond, Max: 2 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := l.Start(ctx, 4); err != nil {
		t.Fatal(err)
	}
	const cycles = 10
	for c := 0; c < cycles; c++ {
		l.Resize(4)
		for i := 0; i < 200; i++ {
			if _, err := q.Put(ctx, []byte(fmt.Sprint(i)), queue.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		for l.Stats().Deleted < int64(200*(c+1)) || l.inFlight.Load() != 0 {
			if time.Now().After(deadline) {
				t.Fatal("messages not handled")
			}
			time.Sleep(time.Millisecond)
		}
		l.Resize(1)
		for {
			l.mu.Lock()
			a, s := l.active, l.stopTokens
			l.mu.Unlock()
			if a == 1 && s == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("tasks did not stop")
			}
			time.Sleep(time.Millisecond)
		}
	}
	// One task is left; it may hold one context for its inline batches.
	n := children(*l.abortCtx.Load())
	cancel()
	if err := l.Wait(); err != nil {
		t.Fatal(err)
	}
	if n > 1 {
		t.Fatalf("after %d grow/shrink cycles with 1 task left, the abort context has %d live children (want <= 1): stopped tasks leak their handler context", cycles, n)
	}
}
