package listener_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/adaptq/adaptq/adaptqtest"
	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/scaling"
)

// More messages refused for overload than the listener remembers failures
// of (1,024): under an adaptive limit none is poisoned for it. The
// excuses of a long outage's backlog must not be evicted while the
// messages are still in the queue.
func TestOverloadOfALargeBacklogNeverPoisons(t *testing.T) {
	const n, refusals = 1500, 3
	var mu sync.Mutex
	refused := map[string]int{}
	h := func(_ context.Context, m *queue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if refused[m.ID] < refusals {
			refused[m.ID]++
			return handler.Overloaded(errors.New("downstream: too busy"))
		}
		return nil
	}
	k, err := adaptqtest.NewListener("work", h, listener.Options{MaxDequeueCount: 2,
		Adaptive: &scaling.AIMDOptions{Min: 1, Max: 32, Initial: 32}})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	for i := range n {
		k.Put("work", fmt.Appendf(nil, "m%d", i))
	}
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	if p := k.Listener("work").Stats().Poisoned; p != 0 {
		t.Fatalf("%d of %d messages poisoned, each refused %d times for overload alone (max_dequeue_count 2)", p, n, refusals)
	}
}

// Adaptive.Max 0 is Concurrency: bounds within Concurrency are valid
// (validation took Max for scaling's default of 64 instead).
func TestAdaptiveMaxDefaultsToConcurrency(t *testing.T) {
	k, err := adaptqtest.NewListener("work", func(context.Context, *queue.Message) error { return nil },
		listener.Options{Concurrency: 200, Adaptive: &scaling.AIMDOptions{Min: 100}})
	if err != nil {
		t.Fatalf("concurrency 200, adaptive min 100: %v", err)
	}
	defer k.Close()
	if f := k.Listener("work").Flow(); f.Min != 100 || f.Max != 200 || f.Limit != 100 {
		t.Fatalf("flow %+v, want 100..200 starting at 100", f)
	}
}

// A handler that panics with an overload-looking error (a must() on a
// call that timed out) crashed: under an adaptive limit it still counts
// towards poisoning, and the message is poisoned at max_dequeue_count
// rather than retried (here up to 5 runs, then it would succeed).
func TestPanicIsNotAnOverloadExcuse(t *testing.T) {
	var mu sync.Mutex
	runs := 0
	h := func(context.Context, *queue.Message) error {
		mu.Lock()
		runs++
		r := runs
		mu.Unlock()
		if r <= 5 {
			panic(fmt.Errorf("call: %w", context.DeadlineExceeded))
		}
		return nil
	}
	k, err := adaptqtest.NewListener("work", h, listener.Options{MaxDequeueCount: 2, Adaptive: &scaling.AIMDOptions{Min: 1, Max: 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	k.Put("work", []byte("crash"))
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if p := k.Listener("work").Stats().Poisoned; p != 1 || runs != 2 {
		t.Fatalf("%d poisoned after %d runs, want 1 after 2 (max_dequeue_count)", p, runs)
	}
}
