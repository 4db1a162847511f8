package listener_test

// Review of 33691ec (issue 12).

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue/driver"
)

var errConflict = errors.New("injected: serialization failure (40001)")

// classifiedItems fails the first delete of every other message with an
// error that only the driver's own Classify calls transient (a SQL
// driver's serialization failure), the way driver.Queue's doc says a
// driver should classify its errors.
type classifiedItems struct {
	driver.Queue
	mu    sync.Mutex
	tried map[string]bool
}

func (f *classifiedItems) DeleteBatch(ctx context.Context, rs []driver.Receipt) ([]error, error) {
	out := make([]error, len(rs))
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, r := range rs {
		if n, _ := strconv.Atoi(r.ID); n%2 == 0 && !f.tried[r.ID] {
			f.tried[r.ID] = true
			out[i] = errConflict
			continue
		}
		out[i] = f.Queue.Delete(ctx, r.ID, r.PopReceipt)
	}
	return out, nil
}

func (f *classifiedItems) Classify(err error) (bool, time.Duration) {
	if errors.Is(err, errConflict) {
		return true, 0
	}
	return f.Queue.Classify(err)
}

// The same as TestTransientDeleteOfOneMessageIsRetried, with the error
// classified by the driver instead of marked with queue.Transient: the
// per-receipt results lose the classification, and 32 processed messages
// are left to run again.
func TestDriverClassifiedDeleteOfOneMessageIsRetried(t *testing.T) {
	rec := newRecorder()
	f := newFixtureWith(t, rec.handle, listener.Options{}, func(q driver.Queue) driver.Queue {
		return &classifiedItems{Queue: q, tried: map[string]bool{}}
	})
	f.put(64)
	f.start()
	eventually(t, "all 64 are handled", func() bool { return f.l.Stats().Processed == 64 })
	eventually(t, "the first deletes are done", func() bool { return f.l.Stats().Deleted == 32 })
	f.clock.Advance(100 * time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	if s := f.l.Stats(); s.DeleteErrors != 0 || s.Deleted != 64 {
		t.Fatalf("stats %+v: every message must be deleted on a retry", s)
	}
}
