package queue_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
)

// Metadata travels with a message; metadata a backend cannot take is
// refused with a typed error that names the key and the limit, and nothing
// is written.
func ExampleMetadataError() {
	ctx := context.Background()
	q, _ := memory.NewStore().Queue("orders")
	_, _ = q.Put(ctx, []byte("order 1"), queue.PutOptions{Metadata: map[string]string{"tenant": "t1"}})
	ms, _ := q.Get(ctx, 1, 30*time.Second)
	fmt.Println(string(ms[0].Body), ms[0].Metadata["tenant"])

	_, err := q.Put(ctx, []byte("order 2"), queue.PutOptions{Metadata: map[string]string{"tenant id": "t1"}})
	var me *queue.MetadataError
	if errors.As(err, &me) {
		fmt.Printf("refused: key %q, limit %q\n", me.Key, me.Limit)
	}
	n, _ := q.Count(ctx)
	fmt.Println("messages:", n)
	// Output:
	// order 1 t1
	// refused: key "tenant id", limit "key characters"
	// messages: 1
}
