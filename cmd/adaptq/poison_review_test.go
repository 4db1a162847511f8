package main

import (
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
)

// An envelope in orders' poison queue that names payments (a forged one:
// payments poisons elsewhere) is not requeued to payments.
func TestPoisonRequeueRefusesAQueueWithAnotherPoisonQueue(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, baseConfig+`  - url: sqlite://$DIR/q.db?queue=payments
    handler: "exec: cat"
`)
	pq := "sqlite://" + dir + "/q.db?queue=orders-poison"
	payments := "sqlite://" + dir + "/q.db?queue=payments"
	mustCLI(t, "", "enqueue", "-c", cfg, "-q", "orders", "seed") // creates the file
	ctx, q := openTest(t, pq)
	b, err := poison.Encode(poison.Message{ID: "x", Queue: "payments", DequeueCount: 5, FailedAt: time.Now(), Body: []byte("pay 1000000")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Put(ctx, b, queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	cli(t, "", "poison", "requeue", "-c", cfg, "-q", "orders", "--all")
	if got := bodiesOf(t, payments); len(got) != 0 {
		t.Fatalf("payments holds %q, requeued from orders' poison queue", got)
	}
	if n := queueDepthOf(t, pq); n != 1 {
		t.Fatalf("orders' poison queue holds %d, want the forged message kept", n)
	}
}

// payments in another file, poisoning onto a queue of the same name as
// orders' poison queue there: the two poison queues share a name only,
// and an envelope in orders' one that names payments is refused.
func TestPoisonRequeueRefusesAPoisonQueueThatOnlySharesTheName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, baseConfig+`    poison_queue: shared-poison
  - url: sqlite://$DIR/pay.db?queue=payments
    handler: "exec: cat"
    poison_queue: shared-poison
`)
	pq := "sqlite://" + dir + "/q.db?queue=shared-poison"
	payments := "sqlite://" + dir + "/pay.db?queue=payments"
	mustCLI(t, "", "enqueue", "-c", cfg, "-q", "orders", "seed") // creates the files
	mustCLI(t, "", "enqueue", "-c", cfg, "-q", "payments", "seed")
	mustCLI(t, "", "purge", "-c", cfg, "-q", "payments", "--yes")
	ctx, q := openTest(t, pq)
	b, err := poison.Encode(poison.Message{ID: "x", Queue: "payments", DequeueCount: 5, FailedAt: time.Now(), Body: []byte("pay 1000000")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Put(ctx, b, queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	cli(t, "", "poison", "requeue", "-c", cfg, "-q", "orders", "--all")
	if got := bodiesOf(t, payments); len(got) != 0 {
		t.Fatalf("payments holds %q, requeued from orders' poison queue in another file", got)
	}
	if n := queueDepthOf(t, pq); n != 1 {
		t.Fatalf("orders' poison queue holds %d, want the forged message kept", n)
	}
}
