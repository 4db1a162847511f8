package listener_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue/driver"
)

// failingGets fails every get while down is set.
type failingGets struct {
	driver.Queue
	down *atomic.Bool
}

var errBackendDown = errors.New("backend down")

func (f *failingGets) Get(ctx context.Context, n int, vis time.Duration) ([]*driver.Message, error) {
	if f.down.Load() {
		return nil, driver.Transient(errBackendDown, 0)
	}
	return f.Queue.Get(ctx, n, vis)
}

// The listener records, by its clock, when a get last succeeded and when
// one last failed, with the error: what the worker's readiness reads.
func TestStatsRecordLastGetAndLastGetError(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	down.Store(true)
	f := newFixtureWith(t, newRecorder().handle, listener.Options{Tasks: 1, Idle: scalingIdle(time.Second)},
		func(d driver.Queue) driver.Queue { return &failingGets{Queue: d, down: &down} })
	if s := f.l.Stats(); !s.LastGet.IsZero() || !s.LastGetError.IsZero() || s.LastGetErr != nil {
		t.Fatalf("before the first get: %v, %v, %v; want zero", s.LastGet, s.LastGetError, s.LastGetErr)
	}
	f.start()
	eventually(t, "a failed get is recorded", func() bool { return !f.l.Stats().LastGetError.IsZero() })
	s := f.l.Stats()
	if !errors.Is(s.LastGetErr, errBackendDown) || !s.LastGet.IsZero() {
		t.Fatalf("after failed gets: last get %v, last error %v; want no success and %v", s.LastGet, s.LastGetErr, errBackendDown)
	}
	if s.LastGetError.Before(f.clock.Now().Add(-time.Minute)) || s.LastGetError.After(f.clock.Now()) {
		t.Fatalf("LastGetError %v is not by the listener's clock (now %v)", s.LastGetError, f.clock.Now())
	}
	down.Store(false)
	eventually(t, "a successful get is recorded", func() bool {
		f.clock.AdvanceToNext() // the task waits out its error backoff
		return !f.l.Stats().LastGet.IsZero()
	})
	if s := f.l.Stats(); s.LastGet.Before(s.LastGetError) {
		t.Fatalf("LastGet %v is before LastGetError %v after the backend came back", s.LastGet, s.LastGetError)
	}
}
