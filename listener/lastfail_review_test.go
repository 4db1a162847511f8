package listener_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
)

// A message that failed once and then succeeded left its queue: the
// listener must not go on remembering its failure (the entries of such
// messages would fill the bounded map and evict the reasons of messages
// still failing, which are then poisoned with an unknown reason).
func TestSucceededMessageForgetsItsFailure(t *testing.T) {
	var runs atomic.Int32
	h := func(context.Context, *queue.Message) error {
		if runs.Add(1) == 1 {
			return errors.New("flaky once")
		}
		return nil
	}
	const vis = 10 * time.Second
	f, _ := poisonFixture(t, h, listener.Options{MaxDequeueCount: 5, VisibilityTimeout: vis, Idle: poisonIdle}, nil)
	if _, err := f.raw.Put(context.Background(), []byte("flaky"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	f.start()
	eventually(t, "the failed run", func() bool { return runs.Load() == 1 })
	f.settle()
	if n := f.l.RememberedFailures(); n != 1 {
		t.Fatalf("remembers %d failures after one failed run, want 1", n)
	}
	f.clock.Advance(vis + time.Second)
	eventually(t, "the successful run's delete", func() bool { return f.l.Stats().Deleted == 1 })
	f.settle()
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	if d := f.depth(); d != 0 {
		t.Fatalf("queue holds %d", d)
	}
	if n := f.l.RememberedFailures(); n != 0 {
		t.Fatalf("remembers %d failures of messages that were deleted, want 0", n)
	}
}
