//go:build unix

package handler_test

import (
	"context"
	"fmt"
	"os"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
)

// Exec runs a program for each message, with the body on standard input.
// Exit code 65 (EX_DATAERR) says the input can never be processed.
func ExampleExec() {
	argv, _ := handler.ParseCommand(`sh -c '
		body=$(cat)
		if [ -z "$body" ]; then echo "empty order" >&2; exit 65; fi
		echo "$ADAPTQ_QUEUE/$ADAPTQ_MESSAGE_ID: $body"'`)
	h, err := handler.Exec(argv, handler.ExecOptions{Queue: "orders", Stdout: os.Stdout})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	err = h(ctx, &queue.Message{ID: "msg-1", DequeueCount: 1, Body: []byte("3 x A-7")})
	fmt.Println("err:", err)

	err = h(ctx, &queue.Message{ID: "msg-2", DequeueCount: 1})
	fmt.Println("permanent:", handler.IsPermanent(err))
	fmt.Println(err)
	// Output:
	// orders/msg-1: 3 x A-7
	// err: <nil>
	// permanent: true
	// handler: exec "sh": exit status 65; stderr: "empty order"
}
