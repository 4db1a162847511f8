package listener_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/scaling"
)

// triggerDuringGet is a producer that puts a message and triggers the
// listener while a get of the listener is on its way (after the backend
// answered it, empty, and before the task reads the answer): once armed.
type triggerDuringGet struct {
	driver.Queue
	armed atomic.Bool
	fire  func()
}

func (q *triggerDuringGet) Get(ctx context.Context, n int, vis time.Duration) ([]*driver.Message, error) {
	ms, err := q.Queue.Get(ctx, n, vis)
	if len(ms) == 0 && err == nil && q.armed.CompareAndSwap(true, false) {
		q.fire()
	}
	return ms, err
}

// A trigger that comes while the task's get is on its way, and finds it
// empty, must still cut the task's idle sleep that follows: the message it
// announces was put after the backend answered. Otherwise the message waits
// a whole idle delay (the safety interval, with a push trigger).
func TestReviewTriggerDuringAnEmptyGetIsNotLost(t *testing.T) {
	rec := newRecorder()
	tq := &triggerDuringGet{}
	f := newFixtureWith(t, rec.handle, listener.Options{Idle: scaling.IdleBackoff{Min: 30 * time.Second, Max: time.Minute}},
		func(q driver.Queue) driver.Queue { tq.Queue = q; return tq })
	tq.fire = func() {
		if _, err := f.raw.Put(context.Background(), []byte("late"), queue.PutOptions{}); err != nil {
			t.Error(err)
		}
		f.l.Wake()
	}
	f.start()
	f.settle()
	tq.armed.Store(true)
	f.l.Wake()                               // the task gets (empty), and the producer puts and triggers meanwhile
	for step := 0; tq.armed.Load(); step++ { // past the trigger floor (5 ms), to the get
		if step == 1000 {
			t.Fatal("no get after the wake")
		}
		f.clock.Advance(time.Millisecond)
		time.Sleep(time.Millisecond) // lets the task move; the outcome does not depend on it
	}
	for range 10 { // a second: well past the trigger floor, far short of the 30 s idle delay
		f.clock.Advance(100 * time.Millisecond)
		time.Sleep(time.Millisecond) // lets the task move; the assertion does not depend on it
	}
	if rec.distinct() != 1 {
		t.Fatalf("the message put and triggered during an empty get did not run within a second; stats %+v", f.l.Stats())
	}
}
