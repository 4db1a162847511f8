package handler_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
)

// JSONBatch decodes every body and calls the typed batch handler with the
// ones that decode; each message gets its own outcome. A body that does
// not decode fails alone, permanently; an error the function returns for a
// value is that value's message's.
func ExampleJSONBatch() {
	h := handler.JSONBatch(func(ctx context.Context, os []Order) []error {
		res := make([]error, len(os))
		for i, o := range os {
			if o.Qty == 0 {
				res[i] = errors.New("no pieces") // this one is retried
			}
		}
		fmt.Println("one INSERT of", len(os), "rows")
		return res
	})
	res := h(context.Background(), []*queue.Message{
		{ID: "msg-1", Body: []byte(`{"id":"A-7","qty":3}`)},
		{ID: "msg-2", Body: []byte(`{"id":"A-8","qty":`)},
		{ID: "msg-3", Body: []byte(`{"id":"A-9","qty":0}`)},
	})
	for i, err := range res {
		fmt.Printf("message %d: %v (permanent: %v)\n", i+1, err, handler.IsPermanent(err))
	}
	// Output:
	// one INSERT of 2 rows
	// message 1: <nil> (permanent: false)
	// message 2: handler: message "msg-2": decode JSON body into handler_test.Order: unexpected end of JSON input (permanent: true)
	// message 3: no pieces (permanent: false)
}
