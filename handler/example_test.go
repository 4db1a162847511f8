package handler_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
)

// Chain puts the first middleware outermost; Recover turns the panic into an
// error, so the message is not deleted and will be delivered again.
func ExampleChain() {
	trace := func(name string) handler.Middleware {
		return func(next handler.Func) handler.Func {
			return func(ctx context.Context, m *queue.Message) error {
				fmt.Println("enter", name)
				defer fmt.Println("leave", name)
				return next(ctx, m)
			}
		}
	}
	h := handler.Chain(
		func(ctx context.Context, m *queue.Message) error { panic("boom") },
		trace("outer"), handler.Recover(), trace("inner"),
	)

	err := h(context.Background(), &queue.Message{ID: "msg-1", DequeueCount: 1})

	var pe *handler.PanicError
	fmt.Println(err)
	fmt.Println("panic:", errors.As(err, &pe), "permanent:", handler.IsPermanent(err))
	// Output:
	// enter outer
	// enter inner
	// leave inner
	// leave outer
	// handler: panic: boom
	// panic: true permanent: false
}

type Order struct {
	ID  string `json:"id"`
	Qty int    `json:"qty"`
}

// JSON decodes the body before calling the typed handler. A body that does
// not decode is a permanent error: no retry can fix it.
func ExampleJSON() {
	h := handler.JSON(func(ctx context.Context, o Order) error {
		fmt.Printf("order %s: %d pieces\n", o.ID, o.Qty)
		return nil
	})
	ctx := context.Background()

	err := h(ctx, &queue.Message{ID: "msg-1", Body: []byte(`{"id":"A-7","qty":3}`)})
	fmt.Println("err:", err)

	err = h(ctx, &queue.Message{ID: "msg-2", Body: []byte(`{"id":"A-8","qty":`)})
	fmt.Println("permanent:", handler.IsPermanent(err))
	fmt.Println(err)
	// Output:
	// order A-7: 3 pieces
	// err: <nil>
	// permanent: true
	// handler: message "msg-2": decode JSON body into handler_test.Order: unexpected end of JSON input
}
