package listener_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/testutil"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/scaling"
)

// fixture is a listener on a metered memory queue, all on one fake clock.
type fixture struct {
	t      *testing.T
	clock  *clock.Fake
	store  *memory.Store
	raw    *queue.Queue // the same queue, unmetered and unwrapped
	meter  *meter.Meter
	q      *queue.Queue
	l      *listener.Listener
	cancel context.CancelFunc
	done   chan error
}

func newFixture(t *testing.T, h handler.Func, o listener.Options) *fixture {
	t.Helper()
	return newFixtureWith(t, h, o, nil)
}

// newFixtureWith puts wrap (a fault injector) between the queue and the
// meter, so the meter bills what the injector does.
func newFixtureWith(t *testing.T, h handler.Func, o listener.Options, wrap func(driver.Queue) driver.Queue) *fixture {
	t.Helper()
	c := clock.NewFake(clock.Epoch)
	store := memory.NewStore(memory.WithClock(c))
	raw, err := store.Queue("work")
	if err != nil {
		t.Fatal(err)
	}
	m := meter.New(0)
	opts := []queue.Option{queue.WithObserver(m)}
	if wrap != nil {
		opts = append(opts, queue.WithWrapper(wrap))
	}
	q, err := store.Queue("work", opts...)
	if err != nil {
		t.Fatal(err)
	}
	o.Clock = c
	l, err := listener.New(q, h, o)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, clock: c, store: store, raw: raw, meter: m, q: q, l: l}
}

// start runs the listener until stop or the end of the test.
func (f *fixture) start() {
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.done = make(chan error, 1)
	if err := f.l.Start(ctx, f.l.Options().Tasks); err != nil {
		f.t.Fatal(err)
	}
	go func() { f.done <- f.l.Wait() }()
	f.t.Cleanup(func() {
		if f.cancel != nil {
			f.stop()
		}
	})
}

// stop cancels the run and waits for Run to return, moving the fake clock
// on so that a shutdown grace period can end.
func (f *fixture) stop() error {
	f.t.Helper()
	f.cancel()
	f.cancel = nil
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-f.done:
			return err
		case <-time.After(time.Millisecond):
			if time.Now().After(deadline) {
				f.t.Fatal("Run did not return after its context ended")
			}
			f.clock.AdvanceToNext()
		}
	}
}

func (f *fixture) put(n int) []string {
	f.t.Helper()
	ids := make([]string, n)
	for i := range ids {
		id, err := f.raw.Put(context.Background(), []byte(fmt.Sprint("m", i)), queue.PutOptions{})
		if err != nil {
			f.t.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

func (f *fixture) depth() int {
	f.t.Helper()
	n, err := f.raw.Count(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// settle waits until every active task sleeps after an empty get (other
// timers, such as a scaling agent's, may be pending too).
func (f *fixture) settle() {
	f.t.Helper()
	eventually(f.t, "all tasks sleep", func() bool {
		st, _ := f.l.State(context.Background())
		return st.ActiveTasks > 0 && st.IdleTasks == st.ActiveTasks && st.InFlight == 0 &&
			f.clock.Pending() >= st.ActiveTasks
	})
}

// recorder is a handler that records how often it saw each id.
type recorder struct {
	mu   sync.Mutex
	seen map[string]int
}

func newRecorder() *recorder { return &recorder{seen: map[string]int{}} }

func (r *recorder) handle(_ context.Context, m *queue.Message) error {
	r.mu.Lock()
	r.seen[m.ID]++
	r.mu.Unlock()
	return nil
}

func (r *recorder) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[id]
}

func (r *recorder) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func scalingIdle(max time.Duration) scaling.IdleBackoff {
	return scaling.IdleBackoff{Min: min(scaling.DefaultMinIdle, max), Max: max}
}

// eventually polls cond (in real time) until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, what, cond)
}
