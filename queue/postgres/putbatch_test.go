package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// TestPutBatchNotifiesOnce: with a notification per put allowed (notify
// interval 0), a batch of 32 sends one NOTIFY, not 32. A Put to another
// queue afterwards is the sentinel: notifications arrive in commit order.
func TestPutBatchNotifiesOnce(t *testing.T) {
	schema := pgtest.Schema(t)
	db := openDB(t, schema, postgres.WithNotifyInterval(0))
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{"adaptq:" + schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	q, err := db.Queue(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	sentinel, err := db.Queue(ctx, "sentinel")
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]queue.PutMessage, 32)
	for i := range msgs {
		msgs[i].Body = []byte(fmt.Sprint(i))
	}
	res, err := q.PutBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("message %d: %v", i, r.Err)
		}
	}
	if _, err := sentinel.Put(ctx, []byte("s"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, hang)
	defer cancel()
	orders := 0
	for {
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Payload == "sentinel" {
			break
		}
		orders++
	}
	if orders != 1 {
		t.Fatalf("%d notifications for one batch put of 32, want 1", orders)
	}
}
