package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
	"github.com/adaptq/adaptq/queue/queuetest"
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

// TestPutWhoseCancelGoesUnansweredSaysItMayBeStored: a Put or PutBatch
// whose statement ran and committed on the server, whose reply is late
// (held in the network) and whose caller then gives up while the server
// cannot be reached for the cancel request either: after cancelWait the
// driver drops the connection, and the outcome is unknown ("as with a
// lost reply", cancelWait's doc). Each result must then be transient ("may
// be stored"). Before the fix pgx's bare context.Canceled came back, not
// transient, which says nothing was written, with the messages stored.
// It waits out cancelWait (5 s), both cases at once.
func TestPutWhoseCancelGoesUnansweredSaysItMayBeStored(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		t.Run(map[bool]string{false: "Put", true: "PutBatch"}[batch], func(t *testing.T) {
			t.Parallel()
			base, err := url.Parse(pgtest.URL(t))
			if err != nil {
				t.Fatal(err)
			}
			proxy := queuetest.NewFaultProxy(t, base.Host)
			proxied := *base
			proxied.Host = proxy.Addr()
			// notify_interval 0s: every put notifies in its own statement,
			// so no trailing notification opens a connection (whose
			// handshake would be held) behind the fault.
			v := url.Values{postgres.ParamQueue: {"unanswered"}, postgres.ParamSchema: {pgtest.Schema(t)}, postgres.ParamNotifyInterval: {"0s"}}
			proxied.RawQuery, base.RawQuery = v.Encode(), v.Encode()
			ctx := context.Background()
			q, err := queue.Open(ctx, proxied.String())
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			direct, err := queue.Open(ctx, base.String())
			if err != nil {
				t.Fatal(err)
			}
			defer direct.Close()
			// Prepare both statements on the proxied pool's connection.
			if _, err := q.Put(ctx, []byte("warm"), queue.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			if res, err := q.PutBatch(ctx, []queue.PutMessage{{Body: []byte("warm")}, {Body: []byte("warm")}}); err != nil || res[0].Err != nil {
				t.Fatalf("PutBatch = %v, %v", res, err)
			}
			before, err := direct.Count(ctx)
			if err != nil {
				t.Fatal(err)
			}
			release, err := proxy.HoldReplies()
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan []error, 1)
			go func() {
				if !batch {
					_, err := q.Put(cctx, []byte("a"), queue.PutOptions{})
					done <- []error{err}
					return
				}
				res, err := q.PutBatch(cctx, []queue.PutMessage{{Body: []byte("a")}, {Body: []byte("b")}})
				if err != nil {
					done <- []error{err}
					return
				}
				errs := make([]error, len(res))
				for i, r := range res {
					errs[i] = r.Err
				}
				done <- errs
			}()
			// The statement committed (its reply is held); then the server
			// cannot be reached (the cancel request is refused).
			waitFor(t, time.Minute, "the statement's commit", func() bool {
				n, err := direct.Count(ctx)
				return err == nil && n > before
			})
			proxy.Refuse(true)
			cancel()
			errs := <-done
			release()
			proxy.Refuse(false)
			after, err := direct.Count(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if after == before {
				t.Fatalf("nothing was stored (%v): the fault did not land after the statement ran", errs)
			}
			for i, err := range errs {
				if err != nil && !queue.IsTransient(err) {
					t.Errorf("message %d: %v, not transient (nothing written), but the queue holds %d new message(s)", i, err, after-before)
				}
			}
		})
	}
}
