package scaling

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/internal/testutil"
)

// However often it is asked, a BoundedDepth reads once per interval, a
// failed read included.
func TestBoundedDepthReadsOncePerInterval(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Time{})
	var reads atomic.Int64
	fail := errors.New("backend down")
	var failing atomic.Bool
	b := NewBoundedDepth(func(context.Context) (int, error) {
		reads.Add(1)
		if failing.Load() {
			return 0, fail
		}
		return 7, nil
	}, BoundedDepthOptions{Interval: 10 * time.Second, Clock: fake})
	for i := range 6000 { // 100 a second for a minute
		r, err := b.Depth(context.Background())
		if err != nil || (r.Err == nil && r.Depth != 7) {
			t.Fatalf("read %d: %+v %v", i, r, err)
		}
		if i == 3000 {
			failing.Store(true)
		}
		fake.Advance(10 * time.Millisecond)
	}
	if n := reads.Load(); n != 6 {
		t.Errorf("a minute at 100 requests a second made %d reads, want 6 (one per 10 s)", n)
	}
}

// Callers that ask while a read is in flight wait for it: one read for
// all of them. The caller that started it may go away without failing it.
func TestBoundedDepthSharesTheReadInFlight(t *testing.T) {
	t.Parallel()
	var reads atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	b := NewBoundedDepth(func(ctx context.Context) (int, error) {
		if reads.Add(1) == 1 {
			close(started)
		}
		select {
		case <-release:
			return 3, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}, BoundedDepthOptions{Interval: time.Minute, Clock: clock.NewFake(time.Time{})})
	leaderCtx, hangUp := context.WithCancel(context.Background())
	leader := make(chan DepthReading, 1)
	go func() { r, _ := b.Depth(leaderCtx); leader <- r }()
	<-started
	hangUp() // the first client goes away: the shared read goes on
	// A waiter whose own request ends gives up alone.
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Depth(gone); !errors.Is(err, context.Canceled) {
		t.Fatalf("a waiter whose context ended: %v, want context.Canceled", err)
	}
	var wg sync.WaitGroup
	got := make(chan DepthReading, 50)
	for range 50 {
		wg.Go(func() {
			r, err := b.Depth(context.Background())
			if err != nil {
				t.Error(err)
			}
			got <- r
		})
	}
	close(release)
	wg.Wait()
	close(got)
	for r := range got {
		if r.Depth != 3 || r.Err != nil {
			t.Errorf("waiter got %+v, want the shared read's 3", r)
		}
	}
	if r := <-leader; r.Depth != 3 || r.Err != nil {
		t.Errorf("the caller that hung up made a read of %+v, want 3", r)
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("51 callers made %d reads, want 1", n)
	}
}

// A zero is believed at once where the count is exact, and only after it
// has held for hold where it is approximate; a backlog asks for one
// instance per messages_per_instance, min being its floor.
func TestDesiredOrZero(t *testing.T) {
	t.Parallel()
	t0 := clock.Epoch
	p := Instances{MessagesPerInstance: 100, Min: 2, Max: 10}
	for _, c := range []struct {
		name  string
		r     DepthReading
		hold  time.Duration
		want  int
		basis Basis
	}{
		{"exact zero", DepthReading{At: t0, ZeroSince: t0}, 0, 0, BasisEmpty},
		{"approximate zero, just read", DepthReading{At: t0, ZeroSince: t0}, time.Minute, 2, BasisEmptyUnconfirmed},
		{"approximate zero, held 59 s", DepthReading{At: t0.Add(59 * time.Second), ZeroSince: t0}, time.Minute, 2, BasisEmptyUnconfirmed},
		{"approximate zero, held a minute", DepthReading{At: t0.Add(time.Minute), ZeroSince: t0}, time.Minute, 0, BasisEmpty},
		{"backlog of 1", DepthReading{Depth: 1, At: t0}, 0, 2, BasisMessagesPerInstance},
		{"backlog of 450", DepthReading{Depth: 450, At: t0}, 0, 5, BasisMessagesPerInstance},
		{"backlog of 5,000", DepthReading{Depth: 5000, At: t0}, 0, 10, BasisMessagesPerInstance},
	} {
		if n, b := p.DesiredOrZero(c.r, c.hold); n != c.want || b != c.basis {
			t.Errorf("%s: %d (%s), want %d (%s)", c.name, n, b, c.want, c.basis)
		}
	}
	if n, _ := (Instances{MessagesPerInstance: 100}).DesiredOrZero(DepthReading{Depth: 1, At: t0}, 0); n != 1 {
		t.Errorf("min 0, one message: %d instances, want 1", n)
	}
}

// The run of zeros: a failed read neither starts nor ends it, a message
// ends it.
func TestBoundedDepthKeepsWhenZeroBegan(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Time{})
	results := []struct {
		n   int
		err error
	}{{0, nil}, {0, errors.New("x")}, {0, nil}, {4, nil}, {0, nil}}
	i := 0
	b := NewBoundedDepth(func(context.Context) (int, error) {
		r := results[i]
		i++
		return r.n, r.err
	}, BoundedDepthOptions{Interval: time.Second, Clock: fake})
	t0 := fake.Now()
	want := []time.Time{t0, t0, t0, {}, t0.Add(4 * time.Second)}
	for k, w := range want {
		r, _ := b.Depth(context.Background())
		if !r.ZeroSince.Equal(w) {
			t.Errorf("read %d (%d, %v): zero since %v, want %v", k, r.Depth, r.Err, r.ZeroSince, w)
		}
		fake.Advance(time.Second)
	}
}

// Once a reading exists, callers that come while the next read is on its
// way get the last reading at once: a slow backend holds one caller, not
// all of them.
func TestBoundedDepthAnswersWithTheLastReadWhileOneIsSlow(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Time{})
	var reads atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	b := NewBoundedDepth(func(ctx context.Context) (int, error) {
		if reads.Add(1) == 1 {
			return 5, nil
		}
		close(started)
		<-release
		return 9, nil
	}, BoundedDepthOptions{Interval: 10 * time.Second, Clock: fake})
	if r, _ := b.Depth(context.Background()); r.Depth != 5 {
		t.Fatalf("first read %+v", r)
	}
	fake.Advance(10 * time.Second)
	slow := make(chan DepthReading, 1)
	go func() { r, _ := b.Depth(context.Background()); slow <- r }()
	<-started
	answered := make(chan error, 1)
	go func() {
		for range 50 {
			if r, err := b.Depth(context.Background()); err != nil || r.Depth != 5 {
				answered <- fmt.Errorf("while a read is slow: %+v %v, want the last reading, 5", r, err)
				return
			}
		}
		answered <- nil
	}()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testutil.HangGuard): // a guard, not a timing: they wait for release otherwise
		close(release)
		t.Fatal("callers waited for the slow read")
	}
	close(release)
	if r := <-slow; r.Depth != 9 {
		t.Errorf("the slow read: %+v, want 9", r)
	}
	if r, _ := b.Depth(context.Background()); r.Depth != 9 {
		t.Errorf("after the slow read: %+v, want 9", r)
	}
	if n := reads.Load(); n != 2 {
		t.Errorf("%d reads, want 2", n)
	}
}

// A read that panics (a driver's bug; net/http recovers a handler's panic
// and serves on) leaves no read in flight behind it: the callers after it
// neither wait forever for a read that will never end nor get the reading
// before it for ever. The panic reaches the caller that made the read.
func TestBoundedDepthSurvivesAReadThatPanics(t *testing.T) {
	t.Parallel()
	for _, first := range []bool{true, false} {
		fake := clock.NewFake(time.Time{})
		var reads atomic.Int64
		b := NewBoundedDepth(func(context.Context) (int, error) {
			n := reads.Add(1)
			if (first && n == 1) || (!first && n == 2) {
				panic("driver bug")
			}
			return int(n) * 10, nil
		}, BoundedDepthOptions{Interval: 10 * time.Second, Clock: fake})
		if !first {
			if r, _ := b.Depth(context.Background()); r.Depth != 10 {
				t.Fatalf("first read: %+v", r)
			}
			fake.Advance(10 * time.Second)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("first=%v: the read's panic did not reach its caller", first)
				}
			}()
			_, _ = b.Depth(context.Background())
		}()
		// The panicked read counts as a failed read, for an interval.
		ctx, cancel := context.WithTimeout(context.Background(), testutil.HangGuard)
		r, err := b.Depth(ctx)
		cancel()
		if err != nil || r.Err == nil {
			t.Errorf("first=%v: just after the panic: %+v %v, want a failed reading", first, r, err)
		}
		fake.Advance(10 * time.Second)
		ctx, cancel = context.WithTimeout(context.Background(), testutil.HangGuard)
		r, err = b.Depth(ctx)
		cancel()
		if want := int(reads.Load()) * 10; err != nil || r.Err != nil || r.Depth != want {
			t.Errorf("first=%v: an interval after the panic: %+v %v, want a new read of %d", first, r, err, want)
		}
	}
}
