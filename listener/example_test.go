package listener_test

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	_ "github.com/adaptq/adaptq/queue/memory"
)

// A listener feeds a queue's messages to a handler func, deletes each
// message its handler succeeds on, and backs off while the queue is empty.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	q, err := queue.Open(ctx, "memory://example-orders")
	if err != nil {
		panic(err)
	}
	for _, order := range []string{"pencils", "paper", "ink"} {
		if _, err := q.Put(ctx, []byte(order), queue.PutOptions{}); err != nil {
			panic(err)
		}
	}

	var mu sync.Mutex
	var handled []string
	handle := func(ctx context.Context, m *queue.Message) error {
		// Delivery is at least once: key side effects on m.ID.
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, string(m.Body))
		if len(handled) == 3 {
			stop() // a real worker runs until it is told to shut down
		}
		return nil // nil: processed, delete it
	}

	l, err := listener.New(q, handle, listener.Options{BatchSize: 32, Tasks: 2})
	if err != nil {
		panic(err)
	}
	if err := l.Run(ctx); err != nil { // returns after a graceful drain
		panic(err)
	}
	sort.Strings(handled)
	left, _ := q.Count(context.Background())
	fmt.Println(handled, "left in queue:", left)
	// Output: [ink paper pencils] left in queue: 0
}
