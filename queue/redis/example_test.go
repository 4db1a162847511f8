package redis_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/adaptq/adaptq/queue"
	_ "github.com/adaptq/adaptq/queue/redis" // registers redis:// and rediss://
)

// A producer and a consumer on the same Redis queue, by URL. (Not run as a
// test: it needs a server; the package's tests run the same calls against
// one.)
func Example() {
	ctx := context.Background()
	q, err := queue.Open(ctx, "redis://127.0.0.1:6379/0?queue=orders")
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()

	if _, err := q.Put(ctx, []byte("order 1001"), queue.PutOptions{}); err != nil {
		log.Fatal(err)
	}
	ms, err := q.Get(ctx, queue.MaxBatchSize, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range ms {
		fmt.Printf("%s (try %d)\n", m.Body, m.DequeueCount)
		if err := q.Delete(ctx, m.ID, m.PopReceipt); err != nil {
			log.Fatal(err)
		}
	}
}
