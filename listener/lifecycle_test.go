package listener_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/scaling"

	"github.com/adaptq/adaptq/internal/testutil"
)

func TestBurstAfterIdleResizesThePoolAndIdleShrinksIt(t *testing.T) {
	gate := make(chan struct{})
	rec := newRecorder()
	h := func(ctx context.Context, m *queue.Message) error {
		<-gate
		return rec.handle(ctx, m)
	}
	var agent *scaling.Agent
	f := newFixture(t, h, listener.Options{
		Tasks:        1,
		Concurrency:  4096,
		Idle:         scaling.IdleBackoff{Max: 10 * time.Second},
		WorkDetected: func(*listener.Listener) { agent.WorkDetected() },
	})
	agent = scaling.NewAgent(f.l, scaling.Proportional{PerTask: 32}, scaling.AgentOptions{MaxTasks: 100, Clock: f.clock})
	actx, acancel := context.WithCancel(context.Background())
	adone := make(chan error)
	go func() { adone <- agent.Run(actx) }()
	defer func() { acancel(); <-adone }()

	f.start()
	f.settle() // idle: one task asleep
	f.put(1000)
	f.clock.AdvanceToNext() // the sleeping task wakes and finds the burst
	want := (1000 + 31) / 32
	eventually(t, "the pool grows to the policy's size", func() bool { return f.l.ActiveTasks() == want })
	close(gate)
	eventually(t, "the burst is deleted", func() bool { return f.l.Stats().Deleted == 1000 })
	if got := f.l.Stats().WorkDetected; got != 1 {
		t.Errorf("WorkDetected = %d for one burst, want 1", got)
	}
	// Idle again: the QueueEmpty rule stops tasks until one is left.
	for steps := 0; f.l.ActiveTasks() > 1; steps++ {
		if steps > 5000 {
			t.Fatalf("pool still %d tasks after the burst", f.l.ActiveTasks())
		}
		f.settle()
		f.clock.AdvanceToNext()
	}
	st, err := f.l.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.ActiveTasks != 1 || st.TotalTasks != want {
		t.Fatalf("after the burst: %d active of %d started, want 1 of %d", st.ActiveTasks, st.TotalTasks, want)
	}
}

func TestShutdownLetsRunningHandlersFinish(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 3)
	h := func(ctx context.Context, m *queue.Message) error {
		started <- struct{}{}
		<-release
		return nil
	}
	f := newFixture(t, h, listener.Options{})
	f.put(3)
	f.start()
	for i := 0; i < 3; i++ {
		<-started
	}
	// The task's next get finds nothing; it sleeps.
	eventually(t, "the task sleeps", func() bool { return f.l.Stats().EmptyGets == 1 && f.clock.Pending() >= 2 })
	gets := f.meter.Snapshot().Gets()
	f.cancel()
	f.cancel = nil
	select {
	case <-f.done:
		t.Fatal("Run returned while handlers were running")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	if err := <-f.done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	// Deletes after success ran although the run's context had ended.
	if d := f.depth(); d != 0 {
		t.Fatalf("depth after shutdown = %d, want 0", d)
	}
	if s := f.l.Stats(); s.Deleted != 3 {
		t.Fatalf("deleted %d, want 3", s.Deleted)
	}
	if got := f.meter.Snapshot().Gets() - gets; got != 0 {
		t.Errorf("%d gets after shutdown began, want none", got)
	}
}

func TestShutdownGraceCancelsHandlers(t *testing.T) {
	started := make(chan struct{}, 1)
	h := func(ctx context.Context, m *queue.Message) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}
	f := newFixture(t, h, listener.Options{ShutdownGrace: 5 * time.Second, VisibilityTimeout: time.Minute})
	f.put(1)
	f.start()
	<-started
	f.cancel()
	f.cancel = nil
	select {
	case <-f.done:
		t.Fatal("Run returned before the grace period ended")
	case <-time.After(20 * time.Millisecond):
	}
	eventually(t, "the grace timer is armed", func() bool {
		for _, d := range f.clock.Deadlines() {
			if d == 5*time.Second {
				return true
			}
		}
		return false
	})
	f.clock.Advance(5 * time.Second)
	if err := <-f.done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if s := f.l.Stats(); s.Failed != 1 || s.Deleted != 0 || s.Released != 1 {
		t.Fatalf("stats %+v: the cancelled handler failed, and its message was released, not deleted", s)
	}
	if d := f.depth(); d != 1 {
		t.Fatalf("depth = %d, want the unfinished message kept", d)
	}
	// Released: another worker gets it now, not after the one-minute
	// visibility timeout.
	if ms, err := f.raw.Get(context.Background(), 1, time.Minute); err != nil || len(ms) != 1 {
		t.Fatalf("a second consumer got %d messages (%v) at once, want the released one", len(ms), err)
	}
}

func TestResize(t *testing.T) {
	f := newFixture(t, newRecorder().handle, listener.Options{Tasks: 2, MaxTasks: 10})
	f.start()
	f.settle()
	f.l.Resize(5)
	f.settle()
	if got := f.l.ActiveTasks(); got != 5 {
		t.Fatalf("after Resize(5): %d tasks", got)
	}
	gets := f.meter.Snapshot().Gets()
	// Shrinking wakes sleeping tasks to stop them: no get, no waiting.
	f.l.Resize(1)
	eventually(t, "four sleeping tasks stop", func() bool {
		st, _ := f.l.State(context.Background())
		return st.IdleTasks == 1
	})
	if got := f.l.ActiveTasks(); got != 1 {
		t.Fatalf("after Resize(1): %d tasks", got)
	}
	if got := f.meter.Snapshot().Gets() - gets; got != 0 {
		t.Errorf("stopping sleeping tasks made %d gets", got)
	}
	f.l.Resize(0)
	if got := f.l.ActiveTasks(); got != 1 {
		t.Errorf("Resize(0) left %d tasks, want MinTasks 1", got)
	}
	f.l.Resize(1000)
	if got := f.l.ActiveTasks(); got != 10 {
		t.Errorf("Resize(1000) made %d tasks, want MaxTasks 10", got)
	}
	st, _ := f.l.State(context.Background())
	if st.TotalTasks != 2+3+9 {
		t.Errorf("TotalTasks = %d, want 14", st.TotalTasks)
	}
}

func TestResizeDoesNothingWhenStopped(t *testing.T) {
	f := newFixture(t, newRecorder().handle, listener.Options{})
	f.l.Resize(5)
	if got := f.l.ActiveTasks(); got != 0 {
		t.Fatalf("Resize before Start started %d tasks", got)
	}
	f.start()
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	f.l.Resize(5)
	if got := f.l.ActiveTasks(); got != 0 {
		t.Fatalf("Resize after shutdown started %d tasks", got)
	}
}

func TestClosedQueueEndsTheListener(t *testing.T) {
	f := newFixture(t, newRecorder().handle, listener.Options{})
	f.start()
	f.settle()
	_ = f.q.Close()
	f.clock.AdvanceToNext()
	select {
	case err := <-f.done:
		f.cancel()
		f.cancel = nil
		if !errors.Is(err, queue.ErrClosed) {
			t.Fatalf("Run = %v, want ErrClosed", err)
		}
	case <-time.After(testutil.HangGuard):
		t.Fatal("the listener kept running on a closed queue")
	}
}

func TestOptionsAreValidated(t *testing.T) {
	q, _ := memory.NewStore().Queue("opts")
	h := newRecorder().handle
	for _, tc := range []struct {
		o    listener.Options
		want string
	}{
		{listener.Options{BatchSize: 33}, "batch_size: 33"},
		{listener.Options{BatchSize: -1}, "batch_size: -1"},
		{listener.Options{VisibilityTimeout: -time.Second}, "visibility_timeout: -1s"},
		{listener.Options{Concurrency: -3}, "concurrency: -3"},
		{listener.Options{BatchSize: 8, NewBatchThreshold: 8}, "new_batch_threshold: 8"},
		{listener.Options{MinTasks: 5, MaxTasks: 2}, "max_tasks: 2"},
		{listener.Options{Tasks: 500}, "tasks: 500"},
		{listener.Options{ShutdownGrace: -time.Second}, "shutdown_grace: -1s"},
		{listener.Options{Idle: scaling.IdleBackoff{Min: time.Minute, Max: time.Second}}, "min 1m0s is above max 1s"},
	} {
		_, err := listener.New(q, h, tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error with %q", tc.o, err, tc.want)
		} else if !strings.Contains(err.Error(), `"opts"`) {
			t.Errorf("error %q does not name the queue", err)
		}
	}
	if _, err := listener.New(q, nil, listener.Options{}); err == nil {
		t.Error("New with a nil handler succeeded")
	}
	if _, err := listener.New(nil, h, listener.Options{}); err == nil {
		t.Error("New with a nil queue succeeded")
	}
	l, err := listener.New(q, h, listener.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := l.Options()
	if o.BatchSize != 32 || o.VisibilityTimeout != 30*time.Second || o.NewBatchThreshold != 16 || o.Idle.Max != time.Minute {
		t.Errorf("defaults = %+v", o)
	}
	_ = meter.Put
}

// cutOffGets holds each get until released, then lets the backend act (the
// messages are hidden) and reports the caller's cancellation if it came
// meanwhile, as a network call cut off midway would.
type cutOffGets struct {
	driver.Queue
	entered chan struct{}
	release chan struct{}
}

func (c *cutOffGets) Get(ctx context.Context, n int, vis time.Duration) ([]*driver.Message, error) {
	select {
	case c.entered <- struct{}{}:
	default:
	}
	<-c.release
	ms, err := c.Queue.Get(context.Background(), n, vis)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return ms, err
}

func TestShutdownDuringAGetLeavesNothingHidden(t *testing.T) {
	cut := &cutOffGets{entered: make(chan struct{}, 1), release: make(chan struct{})}
	f := newFixtureWith(t, newRecorder().handle, listener.Options{VisibilityTimeout: time.Hour},
		func(q driver.Queue) driver.Queue { cut.Queue = q; return cut })
	f.put(5)
	f.start()
	<-cut.entered // the task's get is on its way
	f.cancel()
	f.cancel = nil
	close(cut.release)
	if err := <-f.done; err != nil {
		t.Fatal(err)
	}
	// Whatever that get took is visible again at once, not in an hour.
	ms, err := f.raw.Get(context.Background(), 32, time.Minute)
	if err != nil || len(ms) != 5 {
		t.Fatalf("a second consumer got %d of 5 messages (%v): the rest are hidden with nobody holding them", len(ms), err)
	}
}
