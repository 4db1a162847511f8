package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
)

// barrierDeletes blocks each Delete until n are in flight at once.
type barrierDeletes struct {
	queue.Queue
	n       int
	mu      sync.Mutex
	waiting int
	open    chan struct{}
}

func (b *barrierDeletes) Delete(ctx context.Context, id, r string) error {
	b.mu.Lock()
	b.waiting++
	if b.waiting == b.n {
		close(b.open)
	}
	b.mu.Unlock()
	select {
	case <-b.open:
	case <-time.After(2 * time.Minute): // a hang guard: deletes that run one by one never all arrive
		return errors.New("deletes ran one after another")
	}
	return b.Queue.Delete(ctx, id, r)
}

func TestDeleteEachRunsConcurrentlyAndKeepsOrderForRepeats(t *testing.T) {
	ctx := context.Background()
	mem, _ := memory.NewStore().Queue("delete-each")
	for i := 0; i < 8; i++ {
		if _, err := mem.Put(ctx, []byte(fmt.Sprint(i)), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := mem.Get(ctx, 8, time.Minute)
	if err != nil || len(ms) != 8 {
		t.Fatal(ms, err)
	}
	var rs []queue.Receipt
	for _, m := range ms {
		rs = append(rs, queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
	}
	q := &barrierDeletes{Queue: mem, n: 8, open: make(chan struct{})}
	res := queue.DeleteEach(ctx, q, append(rs, rs[2]))
	for i := 0; i < 8; i++ {
		if res[i] != nil {
			t.Fatalf("delete %d: %v", i, res[i])
		}
	}
	if !errors.Is(res[8], queue.ErrNotFound) {
		t.Fatalf("the repeated id: %v, want ErrNotFound as a sequential delete gives", res[8])
	}
}
