package redis_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
)

// TestDefaultListenerShutdownLeavesNothingHidden: a listener left to its
// default tasks grows to redis.BusyTasks while a backlog fills its gets;
// its run ends half way through 3,000 messages. Every message was then
// handled and deleted, or is visible again at once (the messages fetched
// but not started handed back): none is lost, none handled twice, none
// left hidden for the visibility timeout (an hour).
func TestDefaultListenerShutdownLeavesNothingHidden(t *testing.T) {
	ctx := context.Background()
	c, _ := newClient(t)
	q := mustQueue(t, c, "busyshutdown")
	const n = 3000
	batch := make([]queue.PutMessage, 0, queue.MaxBatchSize)
	for i := range n {
		batch = append(batch, queue.PutMessage{Body: []byte(fmt.Sprint(i))})
		if len(batch) == cap(batch) || i == n-1 {
			rs, err := q.PutBatch(ctx, batch)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rs {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
			}
			batch = batch[:0]
		}
	}
	var (
		mu   sync.Mutex
		runs = map[string]int{}
		most int
		l    *listener.Listener
	)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := func(_ context.Context, m *queue.Message) error {
		a := l.ActiveTasks()
		mu.Lock()
		defer mu.Unlock()
		most = max(most, a)
		runs[m.ID]++
		if len(runs) == n/2 {
			cancel()
		}
		return nil
	}
	var err error
	l, err = listener.New(q, h, listener.Options{VisibilityTimeout: time.Hour, ShutdownGrace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Run(rctx)
	mu.Lock()
	defer mu.Unlock()
	for id, r := range runs {
		if r != 1 {
			t.Errorf("%s handled %d times", id, r)
		}
	}
	left, err := q.Count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	visible := 0
	for {
		ms, err := q.Get(ctx, queue.MaxBatchSize, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			if runs[m.ID] > 0 {
				t.Errorf("%s handled and still in the queue", m.ID)
			}
		}
		visible += len(ms)
	}
	t.Logf("tasks at most %d; handled %d, left %d, of them visible %d", most, len(runs), left, visible)
	if len(runs)+left != n || visible != left {
		t.Fatalf("handled %d + left %d, want %d; %d left hidden", len(runs), left, n, left-visible)
	}
}
