package adaptqtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/adaptq/adaptq/adaptqtest"
	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
)

// A handler must be idempotent: a worker that crashes between the handler
// and the delete runs the message again. LoseDeletes makes that happen.
func Example_redelivery() {
	var mu sync.Mutex
	charged := map[string]int{} // order → times charged
	charge := handler.String(func(_ context.Context, order string) error {
		mu.Lock()
		defer mu.Unlock()
		if charged[order] == 0 { // idempotent: keyed on the order
			charged[order]++
		}
		return nil
	})
	k, err := adaptqtest.NewListener("orders", charge, listener.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer k.Close()
	k.LoseDeletes(1) // the first delete is lost, as if the worker crashed
	id := k.Put("orders", []byte("A1"))
	if err := k.Settle(); err != nil {
		log.Fatal(err)
	}
	m := k.Message(id)
	fmt.Printf("%s after %d runs; A1 charged %d time(s)\n", m.State, len(m.Runs), charged["A1"])
	// Output: deleted after 2 runs; A1 charged 1 time(s)
}

// A message that keeps failing moves to the poison queue after
// max_dequeue_count runs, with its last error as the reason; each retry
// waits out the visibility timeout, in virtual time.
func Example_poison() {
	failing := func(context.Context, *queue.Message) error { return errors.New("inventory: sku unknown") }
	k, err := adaptqtest.NewListener("orders", failing, listener.Options{MaxDequeueCount: 3})
	if err != nil {
		log.Fatal(err)
	}
	defer k.Close()
	id := k.Put("orders", []byte(`{"sku":"nope"}`))
	if err := k.Settle(); err != nil {
		log.Fatal(err)
	}
	m := k.Message(id)
	fmt.Println(m.State, m.Rule, "after", len(m.Runs), "runs:", m.Reason)
	fmt.Println("retried after", m.Runs[1].At.Sub(m.Runs[0].At), "and", m.Runs[2].At.Sub(m.Runs[1].At))
	// Output:
	// poisoned max_dequeue_count after 3 runs: inventory: sku unknown
	// retried after 30s and 30s
}

// busy is a downstream's "503, retry after an hour", as an HTTP client
// might return it: queue.RetryAfter finds the RetryAfter method.
type busy struct{}

func (busy) Error() string             { return "billing: 503 service unavailable" }
func (busy) RetryAfter() time.Duration { return time.Hour }

// A handler that passes on a server's Retry-After has its message hidden
// for that long; the hour passes in well under a millisecond.
func Example_retryAfter() {
	calls := 0
	bill := func(context.Context, *queue.Message) error {
		if calls++; calls == 1 {
			return busy{}
		}
		return nil
	}
	k, err := adaptqtest.NewListener("invoices", bill, listener.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer k.Close()
	id := k.Put("invoices", []byte("INV-7"))
	if err := k.Advance(59 * time.Minute); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after 59m:", k.Message(id).State)
	if err := k.Settle(); err != nil {
		log.Fatal(err)
	}
	m := k.Message(id)
	fmt.Println("then:", m.State, "after", len(m.Runs), "runs,", m.Runs[1].At.Sub(m.Runs[0].At), "apart")
	// Output:
	// after 59m: hidden
	// then: deleted after 2 runs, 1h0m0s apart
}

// A producer is tested by handing it the kit's queue; the consumer then
// runs on what it put, so the two agree on the message's shape.
func ExampleKit_Queue() {
	type order struct {
		ID  string `json:"id"`
		Qty int    `json:"qty"`
	}
	// The producer under test: it puts orders as JSON.
	produce := func(ctx context.Context, q *queue.Queue, o order) (string, error) {
		body, err := json.Marshal(o)
		if err != nil {
			return "", err
		}
		return q.Put(ctx, body, queue.PutOptions{TTL: time.Hour})
	}
	var got []order
	consume := handler.JSON(func(_ context.Context, o order) error {
		got = append(got, o) // one at a time (Concurrency 1); Settle returns after
		return nil
	})
	k, err := adaptqtest.NewListener("orders", consume, listener.Options{Concurrency: 1, BatchSize: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer k.Close()
	q, err := k.Queue("orders")
	if err != nil {
		log.Fatal(err)
	}
	id, err := produce(context.Background(), q, order{ID: "A1", Qty: 3})
	if err != nil {
		log.Fatal(err)
	}
	if err := k.Settle(); err != nil {
		log.Fatal(err)
	}
	fmt.Println(k.Message(id).State, got)
	// Output: deleted [{A1 3}]
}
