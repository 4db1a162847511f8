package listener

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/scaling"
)

// Issue 21: a task that stops (by Resize, by the idle rule, or in the
// sleep after a failed get) must end the handler context it keeps for its
// inline batches. Before the fix each such stop left one live child on the
// run's abort context until Wait, so a pool that breathes with its bursts
// all day grew without bound.

// retained is what the listener holds that could grow with churn.
type retained struct {
	contexts   int64  // handler contexts not yet cancelled
	goroutines int    // of the whole process
	heap       uint64 // live Go heap after a GC
}

func measureRetained(l *Listener) retained {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return retained{contexts: l.liveContexts.Load(), goroutines: runtime.NumGoroutine(), heap: ms.HeapAlloc}
}

// waitFor polls cond; it is a deadline for a hang, not a timing assertion.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// settledTo waits until the pool is n tasks with no stop request pending
// and nothing in flight.
func settledTo(t *testing.T, l *Listener, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("the pool settles at %d tasks", n), func() bool {
		l.mu.Lock()
		a, s := l.active, l.stopTokens
		l.mu.Unlock()
		return a == n && s == 0 && l.inFlight.Load() == 0
	})
}

func TestStoppedTasksEndTheirHandlerContext(t *testing.T) {
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
		waitFor(t, "the messages are deleted", func() bool {
			return l.Stats().Deleted >= int64(200*(c+1)) && l.inFlight.Load() == 0
		})
		l.Resize(1)
		settledTo(t, l, 1)
	}
	// One task is left; it may hold one context for its inline batches.
	// The pool counts a task stopped as it takes its stop request, before
	// its goroutine returns and ends its context, and a parallel runner
	// settles its last message before it ends its own: wait for them to
	// finish, as a leaked context never would.
	waitFor(t, "stopped tasks and finished runners end their handler contexts", func() bool {
		return l.liveContexts.Load() <= 1
	})
	cancel()
	if err := l.Wait(); err != nil {
		t.Fatal(err)
	}
	if n := l.liveContexts.Load(); n != 0 {
		t.Fatalf("%d handler contexts live after Wait", n)
	}
}

// TestChurnRetainsNothing breathes the pool thousands of times, through
// every way a task stops (resize while busy or asleep, the idle rule, the
// sleep after failed gets is covered by the torture test) and trigger
// wake-ups, and checks that what the listener retains does not grow with
// the number of cycles: live handler contexts, goroutines, and the Go
// heap after GC.
func TestChurnRetainsNothing(t *testing.T) {
	cycles := 3000
	if testing.Short() {
		cycles = 300
	}
	q, err := memory.NewStore().Queue("churn")
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, *queue.Message) error { return nil }
	var notifier LocalNotifier
	const maxTasks = 8
	l, err := New(q, h, Options{Tasks: 1, MinTasks: 1, MaxTasks: maxTasks, BatchSize: 4,
		Notifier: &notifier, SafetyInterval: 5 * time.Millisecond,
		Idle: scaling.IdleBackoff{Min: 100 * time.Microsecond, Max: time.Millisecond, Delta: 100 * time.Microsecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := l.Start(ctx, 1); err != nil {
		t.Fatal(err)
	}
	put := 0
	cycle := func(c int) {
		l.Resize(2 + c%(maxTasks-1))
		for i := 0; i < 1+c%9; i++ {
			if _, err := q.Put(ctx, []byte("m"), queue.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			put++
		}
		l.o.Notifier.Notify(q.Name())
		waitFor(t, "the messages are deleted", func() bool {
			return l.Stats().Deleted == int64(put) && l.inFlight.Load() == 0
		})
		if c%3 == 0 {
			// Idle stops: the surplus tasks find the queue empty and stop
			// by the idle rule.
			settledTo(t, l, 1)
		} else {
			l.Resize(1)
			settledTo(t, l, 1)
		}
	}
	const warm = 100
	for c := 0; c < warm; c++ {
		cycle(c)
	}
	before := measureRetained(l)
	for c := warm; c < cycles; c++ {
		cycle(c)
	}
	after := measureRetained(l)
	st := l.Stats()
	t.Logf("%d cycles, %d tasks started, %d triggers, %d messages; retained before %+v, after %+v",
		cycles, l.totalTasks.Load(), st.Triggers, put, before, after)
	// One task is left, which may keep one context for its inline batches.
	if after.contexts > 1 {
		t.Errorf("%d handler contexts live with 1 task left after %d cycles (want <= 1)", after.contexts, cycles)
	}
	if after.goroutines > before.goroutines+2 {
		t.Errorf("goroutines grew from %d to %d over %d cycles", before.goroutines, after.goroutines, cycles-warm)
	}
	// The leaked contexts of issue 21 grew the heap by ~350 KB over these
	// cycles; the noise after two GCs is a few tens of KB.
	const slack = 160 << 10
	if after.heap > before.heap+slack {
		t.Errorf("live heap grew from %d to %d bytes over %d cycles", before.heap, after.heap, cycles-warm)
	}
	cancel()
	if err := l.Wait(); err != nil {
		t.Fatal(err)
	}
	if n := l.liveContexts.Load(); n != 0 {
		t.Fatalf("%d handler contexts live after Wait", n)
	}
}
