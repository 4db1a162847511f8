package scaling

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
)

// After a quiet spell the last reading is old: a caller that comes while
// the read it started is in flight must not be answered with it (an hour
// old here), but wait for the fresh read like a caller before the first
// (here its context has ended, so it gets its context's error).
func TestBoundedDepthServesNoOldReadingAfterAQuietSpell(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Time{})
	started, release := make(chan struct{}, 1), make(chan struct{})
	var block bool
	b := NewBoundedDepth(func(ctx context.Context) (int, error) {
		if !block {
			return 5, nil
		}
		started <- struct{}{}
		<-release
		return 0, nil
	}, BoundedDepthOptions{Interval: time.Second, Clock: fake})
	if r, err := b.Depth(context.Background()); err != nil || r.Depth != 5 {
		t.Fatalf("first read: %+v, %v", r, err)
	}
	fake.Advance(time.Hour)
	block = true
	fresh := make(chan DepthReading, 1)
	go func() { r, _ := b.Depth(context.Background()); fresh <- r }()
	<-started
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	r, err := b.Depth(gone)
	if err == nil && fake.Now().Sub(r.At) > 2*time.Second {
		t.Errorf("while the fresh read was in flight a caller got a reading %s old (%+v)", fake.Now().Sub(r.At), r)
	} else if err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("a waiter whose context ended: %v, want context.Canceled", err)
	}
	close(release)
	if r := <-fresh; r.Depth != 0 || !r.At.Equal(fake.Now()) {
		t.Errorf("the fresh read: %+v", r)
	}
}

// While reads come continuously (a flood) and one is slow, callers are
// still answered at once with the last reading, at most two intervals
// older than the read in flight: a slow backend holds one request, not
// all of them.
func TestBoundedDepthServesTheLastReadingDuringAFlood(t *testing.T) {
	t.Parallel()
	fake := clock.NewFake(time.Time{})
	started, release := make(chan struct{}, 1), make(chan struct{})
	var block bool
	b := NewBoundedDepth(func(ctx context.Context) (int, error) {
		if !block {
			return 5, nil
		}
		started <- struct{}{}
		<-release
		return 6, nil
	}, BoundedDepthOptions{Interval: time.Second, Clock: fake})
	if _, err := b.Depth(context.Background()); err != nil {
		t.Fatal(err)
	}
	fake.Advance(1500 * time.Millisecond)
	block = true
	done := make(chan struct{})
	go func() { _, _ = b.Depth(context.Background()); close(done) }()
	<-started
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if r, err := b.Depth(gone); err != nil || r.Depth != 5 {
		t.Errorf("during a slow read in a flood: %+v, %v; want the last reading at once", r, err)
	}
	close(release)
	<-done
}
