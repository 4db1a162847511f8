package handler_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
)

// ParseCommand splits a command from a config file the way a shell would,
// but expands nothing.
func ExampleParseCommand() {
	argv, err := handler.ParseCommand(`python3 -m billing.worker --region "eu west" --tag 'a b' $HOME`)
	fmt.Printf("%q %v\n", argv, err)

	_, err = handler.ParseCommand(`sh -c 'echo unterminated`)
	fmt.Println(err)
	// Output:
	// ["python3" "-m" "billing.worker" "--region" "eu west" "--tag" "a b" "$HOME"] <nil>
	// handler: command "sh -c 'echo unterminated": unterminated single quote at byte 6
}

// HTTP posts each message to a service written in any language; the
// status of the response decides the message's fate.
func ExampleHTTP() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("got %s (id %s, delivery %s, queue %s)\n", body,
			r.Header.Get("X-Adaptq-Message-Id"), r.Header.Get("X-Adaptq-Dequeue-Count"), r.Header.Get("X-Adaptq-Queue"))
		if string(body) == "{}" {
			http.Error(w, "missing field: order_id", http.StatusUnprocessableEntity)
		}
	}))
	defer srv.Close()

	h, err := handler.HTTP(srv.URL+"/orders", handler.HTTPOptions{Queue: "orders", ContentType: "application/json"})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	inserted := time.Date(2024, 3, 5, 13, 7, 9, 0, time.UTC)

	err = h(ctx, &queue.Message{ID: "msg-1", DequeueCount: 1, InsertedAt: inserted, Body: []byte(`{"order_id":7}`)})
	fmt.Println("err:", err)

	err = h(ctx, &queue.Message{ID: "msg-2", DequeueCount: 1, InsertedAt: inserted, Body: []byte(`{}`)})
	fmt.Println("permanent:", handler.IsPermanent(err))
	// Output:
	// got {"order_id":7} (id msg-1, delivery 1, queue orders)
	// err: <nil>
	// got {} (id msg-2, delivery 1, queue orders)
	// permanent: true
}
