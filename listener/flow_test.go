package listener_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/adaptqtest"
	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/scaling"
)

// starts records when (on the kit's clock) each handler call began.
type starts struct {
	mu    sync.Mutex
	k     *adaptqtest.Kit
	at    []time.Time
	calls map[string]int
}

func (s *starts) handle(_ context.Context, m *queue.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	s.at = append(s.at, s.k.Now())
	s.calls[m.ID]++
	return nil
}

// runLimited puts n messages to a listener limited to perSec a second
// with burst, settles, and returns the start times in order.
func runLimited(t *testing.T, n int, perSec float64, burst int) []time.Time {
	t.Helper()
	s := &starts{}
	k, err := adaptqtest.NewListener("work", s.handle, listener.Options{
		RateLimit: listener.RateLimit{PerSecond: perSec, Burst: burst},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	s.k = k
	for i := range n {
		k.Put("work", fmt.Appendf(nil, "m%d", i))
	}
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.at) != n || len(s.calls) != n {
		t.Fatalf("%d handler calls for %d distinct messages, want %d of each", len(s.at), len(s.calls), n)
	}
	at := slices.Clone(s.at)
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	return at
}

// 1,000 messages at 100 a second, one at a time (burst 1), take 10 s of
// virtual time, give or take one tick (10 ms): the k-th starts no sooner
// than k ticks after the first, and the last at 9.99 s.
func TestRateLimitStartsAThousandMessagesInTenSeconds(t *testing.T) {
	const n, perSec = 1000, 100
	tick := time.Second / perSec
	at := runLimited(t, n, perSec, 1)
	for i, a := range at {
		if d := a.Sub(at[0]); d < time.Duration(i)*tick {
			t.Fatalf("message %d started %s after the first: faster than %d a second", i, d, perSec)
		}
	}
	took := at[n-1].Sub(at[0]) + tick // the last one's tick included
	if took < 10*time.Second-tick || took > 10*time.Second+tick {
		t.Fatalf("1,000 messages at 100/s took %s, want 10s ± %s", took, tick)
	}
}

// With the default burst (a second's worth, at most a batch: 32 at
// 100/s), a get fetches a batch once its tokens are there: the rate holds
// over every window, and the run takes no longer than 10 s.
func TestRateLimitDefaultBurstKeepsTheRate(t *testing.T) {
	const n, perSec = 1000, 100
	at := runLimited(t, n, perSec, 0)
	burst := 32
	for i := range at {
		// In any window [at[i], at[j]] at most burst + rate × length start.
		for j := i + 1; j < len(at) && j < i+200; j++ {
			if allowed := burst + int(at[j].Sub(at[i]).Seconds()*perSec+1e-9); j-i+1 > allowed {
				t.Fatalf("%d messages started within %s: more than the burst %d and %d/s allow", j-i+1, at[j].Sub(at[i]), burst, perSec)
			}
		}
	}
	if took := at[n-1].Sub(at[0]); took > 10*time.Second || took < (n-32)*time.Second/perSec {
		t.Fatalf("took %s, want between %s and 10s", took, (n-32)*time.Second/perSec)
	}
}

// A limited listener fetches only what it may start: the messages it has
// no token for stay visible, and another consumer of the queue gets them
// at once; the limited one never runs them.
func TestRateLimitedListenerLeavesWhatItCannotStartToOthers(t *testing.T) {
	rec := newRecorder()
	f := newFixture(t, rec.handle, listener.Options{RateLimit: listener.RateLimit{PerSecond: 1, Burst: 1}})
	ids := f.put(10)
	f.start()
	eventually(t, "one message ran and the task waits for a token", func() bool {
		st := f.l.LocalState()
		return rec.distinct() == 1 && f.l.Flow().RateWaits >= 1 && st.InFlight == 0 && f.l.ParkedTasks() == 1
	})
	if st := f.l.LocalState(); st.InFlight != 0 {
		t.Fatalf("the limited listener holds %d messages it has not started", st.InFlight)
	}
	// Another worker: everything the limited one did not start is there.
	other, err := f.store.Queue("work")
	if err != nil {
		t.Fatal(err)
	}
	got, err := other.Get(context.Background(), 32, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 9 {
		t.Fatalf("another worker got %d messages, want the 9 the limited listener did not start", len(got))
	}
	for _, m := range got {
		if rec.count(m.ID) != 0 {
			t.Fatalf("message %s was run by the limited listener and is visible to another worker", m.ID)
		}
		if err := other.Delete(context.Background(), m.ID, m.PopReceipt); err != nil {
			t.Fatal(err)
		}
	}
	f.clock.Advance(2 * time.Second)
	f.settle()
	ran := 0
	for _, id := range ids {
		if c := rec.count(id); c > 1 {
			t.Fatalf("message %s ran %d times", id, c)
		} else if c == 1 {
			ran++
		}
	}
	if ran != 1 || f.depth() != 0 {
		t.Fatalf("the limited listener ran %d messages and %d are left, want 1 and 0", ran, f.depth())
	}
}

// An idle queue costs a limited listener no more gets than an unlimited
// one: an empty get takes no token, so the limit never delays the idle
// polling.
func TestIdleRateLimitedQueueCostsNoMoreGets(t *testing.T) {
	idleGets := func(r listener.RateLimit) int64 {
		k, err := adaptqtest.NewListener("work", func(context.Context, *queue.Message) error { return nil }, listener.Options{RateLimit: r})
		if err != nil {
			t.Fatal(err)
		}
		defer k.Close()
		if err := k.Advance(time.Hour); err != nil {
			t.Fatal(err)
		}
		return k.Listener("work").Stats().EmptyGets
	}
	free := idleGets(listener.RateLimit{})
	limited := idleGets(listener.RateLimit{PerSecond: 0.5, Burst: 1})
	if limited > free || free == 0 {
		t.Fatalf("an idle hour: %d empty gets with a limit of 0.5/s, %d without; want no more", limited, free)
	}
}

// A downstream that answers "overloaded" beyond its capacity: under an
// adaptive limit no message is poisoned for it, however often it is
// refused (max_dequeue_count 2, refused 4 times each); with a fixed
// concurrency the same messages are poisoned.
func TestOverloadAloneNeverPoisonsUnderAnAdaptiveLimit(t *testing.T) {
	run := func(adaptive bool) (poisoned int64, flow listener.FlowState) {
		var mu sync.Mutex
		refused := map[string]int{}
		h := func(_ context.Context, m *queue.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if refused[m.ID] < 4 {
				refused[m.ID]++
				return handler.Overloaded(errors.New("downstream: too busy"))
			}
			return nil
		}
		o := listener.Options{MaxDequeueCount: 2}
		if adaptive {
			o.Adaptive = &scaling.AIMDOptions{Min: 1, Max: 16}
		}
		k, err := adaptqtest.NewListener("work", h, o)
		if err != nil {
			t.Fatal(err)
		}
		defer k.Close()
		var ids []string
		for i := range 50 {
			ids = append(ids, k.Put("work", fmt.Appendf(nil, "m%d", i)))
		}
		if err := k.Settle(); err != nil {
			t.Fatal(err)
		}
		if adaptive {
			for _, id := range ids {
				k.RequireHandled(t, id)
			}
		}
		l := k.Listener("work")
		return l.Stats().Poisoned, l.Flow()
	}
	if p, fl := run(true); p != 0 || fl.Overloads != 200 || fl.Cuts == 0 || !fl.Adaptive {
		t.Fatalf("adaptive: %d poisoned, %d overloads, %d cuts; want 0 poisoned, 200 overloads and some cuts", p, fl.Overloads, fl.Cuts)
	}
	if p, _ := run(false); p != 50 {
		t.Fatalf("fixed concurrency: %d poisoned, want all 50 (the rule the adaptive limit changes)", p)
	}
}

func TestFlowOptionsNameTheField(t *testing.T) {
	for _, c := range []struct {
		o    listener.Options
		want string
	}{
		{listener.Options{RateLimit: listener.RateLimit{PerSecond: -1}}, "rate_limit.per_second: -1"},
		{listener.Options{RateLimit: listener.RateLimit{Burst: 3}}, "rate_limit.burst: 3 is set without"},
		{listener.Options{RateLimit: listener.RateLimit{PerSecond: 1, Burst: -2}}, "rate_limit.burst: -2 is negative"},
		{listener.Options{Adaptive: &scaling.AIMDOptions{Min: 5, Max: 2}}, "max: 2 is below min 5"},
	} {
		f := func() (err error) {
			k, err := adaptqtest.NewListener("work", func(context.Context, *queue.Message) error { return nil }, c.o)
			if err == nil {
				k.Close()
			}
			return err
		}
		if err := f(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %q", c.o, err, c.want)
		}
	}
}

// Under an adaptive limit the listener holds no more messages than the
// limit lets it run: with the limit at 3 and handlers that block, 3 run,
// none waits fetched, and the other 17 stay visible for other workers.
func TestAdaptiveLimitBoundsWhatTheListenerHolds(t *testing.T) {
	release := make(chan struct{})
	h := func(ctx context.Context, m *queue.Message) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}
	f := newFixture(t, h, listener.Options{Adaptive: &scaling.AIMDOptions{Min: 3, Max: 3}})
	f.put(20)
	f.start()
	eventually(t, "3 handlers run", func() bool { return f.l.LocalState().InFlight == 3 })
	ms, err := f.raw.Peek(context.Background(), 32)
	if err != nil {
		t.Fatal(err)
	}
	if st := f.l.LocalState(); st.InFlight != 3 || len(ms) != 17 || f.l.Flow().Limit != 3 {
		t.Fatalf("in flight %d, visible %d, limit %d; want 3, 17, 3", st.InFlight, len(ms), f.l.Flow().Limit)
	}
	close(release)
}
