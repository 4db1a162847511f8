package listener_test

import (
	"context"
	"sync"
	"testing"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// busyFeatures reports BusyTasks over the memory driver, as a backend
// whose concurrent gets overlap (PostgreSQL) does.
type busyFeatures struct {
	driver.Queue
	busy int
}

func (b busyFeatures) Features() driver.Features {
	f := b.Queue.Features()
	f.BusyTasks = b.busy
	return f
}

// drainObservingTasks drains n messages with o and returns the most tasks
// any handler saw running, and how often each message ran.
func drainObservingTasks(t *testing.T, busy int, o listener.Options, n int) (int, map[string]int) {
	t.Helper()
	var (
		mu   sync.Mutex
		most int
		runs = map[string]int{}
		l    *listener.Listener
		done = make(chan struct{})
	)
	h := func(_ context.Context, m *queue.Message) error {
		a := l.ActiveTasks()
		mu.Lock()
		defer mu.Unlock()
		most = max(most, a)
		runs[m.ID]++
		if len(runs) == n {
			select {
			case <-done:
			default:
				close(done)
			}
		}
		return nil
	}
	f := newFixtureWith(t, h, o, func(d driver.Queue) driver.Queue { return busyFeatures{Queue: d, busy: busy} })
	l = f.l
	f.put(n)
	f.start()
	<-done
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return most, runs
}

// A listener left to its default pool grows to the driver's BusyTasks
// while gets come back full, and no further; every message runs once.
func TestDefaultPoolGrowsToBusyTasks(t *testing.T) {
	const n = 32 * 12
	most, runs := drainObservingTasks(t, 4, listener.Options{}, n)
	if most < 2 || most > 4 {
		t.Errorf("most tasks seen: %d, want 2..4 (BusyTasks 4)", most)
	}
	for id, k := range runs {
		if k != 1 {
			t.Errorf("message %s ran %d times", id, k)
		}
	}
}

// Tasks set by the caller (or by the worker's scaler through Resize) is
// the caller's: the listener does not grow it.
func TestExplicitTasksDoNotGrow(t *testing.T) {
	most, _ := drainObservingTasks(t, 4, listener.Options{Tasks: 1}, 32*12)
	if most != 1 {
		t.Errorf("most tasks seen: %d, want 1 (Tasks: 1 given)", most)
	}
	most, _ = drainObservingTasks(t, 0, listener.Options{}, 32*12)
	if most != 1 {
		t.Errorf("most tasks seen: %d, want 1 (BusyTasks 0)", most)
	}
}
