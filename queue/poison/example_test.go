package poison_test

import (
	"fmt"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
)

// A poison message carries the original's id, dequeue count and last
// failure; Decode reads it back from the poison queue's message, and reads
// a bare body (from an older version) as one with unknown metadata.
func Example() {
	at := time.Date(2026, 11, 22, 20, 0, 0, 0, time.UTC)
	body, err := poison.Encode(poison.Message{
		ID: "42", Queue: "orders", DequeueCount: 5, Rule: poison.RuleMaxDequeue,
		Reason: "exit status 3", FailedAt: at, InsertedAt: at.Add(-time.Minute), Body: []byte(`{"order":"A1"}`),
	}, queue.DefaultMaxBodySize)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s\n", body)

	m := poison.Decode(&queue.Message{ID: "p-7", Body: body})
	fmt.Println(m.PoisonID, m.ID, m.Queue, m.DequeueCount, m.Reason, string(m.Body))

	old := poison.Decode(&queue.Message{ID: "p-8", Body: []byte("bare")})
	fmt.Println(old.PoisonID, old.Enveloped, string(old.Body))
	// Output:
	// adaptq-poison/1 {"id":"42","queue":"orders","dequeue_count":5,"rule":"max_dequeue_count","reason":"exit status 3","failed_at":"2026-11-22T20:00:00Z","inserted_at":"2026-11-22T19:59:00Z","size":14}
	// {"order":"A1"}
	// p-7 42 orders 5 exit status 3 {"order":"A1"}
	// p-8 false bare
}
