package sqlite_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/sqlite"
)

func Example() {
	dir, _ := os.MkdirTemp("", "adaptq-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	db, err := sqlite.Open(filepath.Join(dir, "adaptq.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	q, err := db.Queue("orders")
	if err != nil {
		log.Fatal(err)
	}

	for _, body := range []string{"order-1", "order-2", "order-3"} {
		if _, err := q.Put(ctx, []byte(body), queue.PutOptions{}); err != nil {
			log.Fatal(err)
		}
	}
	ms, err := q.Get(ctx, queue.MaxBatchSize, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	rs := make([]queue.Receipt, len(ms))
	for i, m := range ms {
		fmt.Printf("%s (dequeue count %d)\n", m.Body, m.DequeueCount)
		rs[i] = queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt}
	}
	// One transaction for the whole batch; one result per receipt.
	if _, err := q.DeleteBatch(ctx, rs); err != nil {
		log.Fatal(err)
	}
	n, _ := q.Count(ctx)
	fmt.Println("left:", n)
	// Output:
	// order-1 (dequeue count 1)
	// order-2 (dequeue count 1)
	// order-3 (dequeue count 1)
	// left: 0
}

func Example_url() {
	dir, _ := os.MkdirTemp("", "adaptq-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	// Both URLs name one file: the process shares one DB between them.
	url := "sqlite://" + filepath.Join(dir, "adaptq.db")
	producer, err := queue.Open(ctx, url+"?queue=emails")
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()
	consumer, err := queue.Open(ctx, url+"?queue=emails&busy_timeout=10s")
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()

	if _, err := producer.Put(ctx, []byte("welcome"), queue.PutOptions{TTL: time.Hour}); err != nil {
		log.Fatal(err)
	}
	ms, _ := consumer.Get(ctx, 1, time.Minute)
	fmt.Println(string(ms[0].Body))

	_, err = queue.Open(ctx, url+"?queue=emails&ttl=1h")
	fmt.Println(strings.ReplaceAll(err.Error(), dir, "DIR"))
	// Output:
	// welcome
	// sqlite: open: queue: invalid queue URL "sqlite://DIR/adaptq.db?queue=emails&ttl=1h": unknown parameter "ttl" (allowed: queue, busy_timeout, sync)
}
