package queue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
)

// Depth tells visible messages from those in flight where the driver can
// (here the memory driver); it is one backend call, metered as a Count.
func ExampleQueue_Depth() {
	ctx := context.Background()
	q, _ := memory.NewStore().Queue("orders")
	for _, b := range []string{"a", "b", "c"} {
		_, _ = q.Put(ctx, []byte(b), queue.PutOptions{})
	}
	_, _ = q.Get(ctx, 1, time.Minute) // one message in flight
	d, err := q.Depth(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("messages:", d.Messages, "visible:", d.Visible, "in flight:", d.InFlight, "oldest known:", !d.Oldest.IsZero())
	// Output: messages: 3 visible: 2 in flight: 1 oldest known: true
}

// countingObserver counts the calls it sees by operation.
type countingObserver struct{ ops map[queue.Op]int }

func (o *countingObserver) Observe(c queue.Call) {
	if !c.Rejected {
		o.ops[c.Op]++
	}
}

// Depth is metered as one Count; a wrapper that embeds the driver hides
// driver.DepthReader, so the depth is Count's total alone; a closed queue
// refuses it.
func TestDepthIsOneMeteredCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := memory.NewStore()
	obs := &countingObserver{ops: map[queue.Op]int{}}
	q, err := store.Queue("depth", queue.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if d, err := q.Depth(ctx); err != nil || !d.Split || d.Visible != 1 || obs.ops[queue.OpCount] != 1 {
		t.Fatalf("Depth = %+v, %v; %d count calls observed; want 1 visible, split, 1 call", d, err, obs.ops[queue.OpCount])
	}
	wrapped, err := store.Queue("depth", queue.WithWrapper(func(d driver.Queue) driver.Queue { return struct{ driver.Queue }{d} }))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := wrapped.Depth(ctx); err != nil || d.Split || d.Messages != 1 {
		t.Fatalf("Depth through a wrapper = %+v, %v; want 1 message, not split", d, err)
	}
	_ = q.Close()
	if _, err := q.Depth(ctx); !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("Depth of a closed queue: %v, want ErrClosed", err)
	}
}
