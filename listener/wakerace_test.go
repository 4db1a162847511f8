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

// putDuringGet is a queue whose first empty get sees, before it returns, a
// producer put a message and pull the trigger: the trigger lands between
// the get and the sleep that follows it.
type putDuringGet struct {
	driver.Queue
	armed  atomic.Bool
	during func()
}

func (q *putDuringGet) Get(ctx context.Context, n int, vis time.Duration) ([]*driver.Message, error) {
	ms, err := q.Queue.Get(ctx, n, vis)
	if err == nil && len(ms) == 0 && q.armed.CompareAndSwap(true, false) {
		q.during()
	}
	return ms, err
}

// A trigger pulled while a task's get is on its way, which then comes back
// empty, wakes the task from the sleep after that get: the signal is not
// lost because the task was not asleep yet (issue 27, item 4: the push
// trigger is the fast path by default, and a lost one cost up to idle.max).
func TestTriggerDuringAnEmptyGetIsNotLost(t *testing.T) {
	rec := newRecorder()
	var f *fixture
	pdg := &putDuringGet{}
	pdg.armed.Store(true)
	pdg.during = func() {
		if _, err := f.raw.Put(context.Background(), []byte("late"), queue.PutOptions{}); err != nil {
			t.Error(err)
		}
		f.l.Wake() // what a trigger does, here before the get returns
	}
	f = newFixtureWith(t, rec.handle, listener.Options{
		Tasks:          1,
		Notifier:       &listener.LocalNotifier{},
		Idle:           scaling.IdleBackoff{Min: time.Hour, Max: time.Hour, Delta: time.Hour},
		SafetyInterval: time.Hour,
	}, func(d driver.Queue) driver.Queue { pdg.Queue = d; return pdg })
	start := f.clock.Now()
	f.start()
	eventually(t, "the message put during the empty get is handled well before the hour's sleep ends", func() bool {
		if rec.distinct() == 1 {
			return true
		}
		if next, ok := f.clock.NextDeadline(); ok && next.Sub(start) < time.Minute {
			f.clock.AdvanceToNext()
		}
		return false
	})
}
