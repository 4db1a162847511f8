package redis_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/queuetest"
)

// TestLostRepliesThroughTheURL: a queue opened by URL, whose reply to a
// call is lost after the server acted (the fault proxy swallows it and
// closes the connection), neither acts twice nor misreports what it did.
// A put returns its one message's id; a visibility update returns a
// receipt that holds (not ErrReceiptMismatch); a delete and a batch delete
// return an error the caller can classify as transient (not ErrNotFound),
// and the message is gone. (Issue 25: go-redis's retries sent each again.)
func TestLostRepliesThroughTheURL(t *testing.T) {
	c, prefix := newClient(t)
	opt, err := goredis.ParseURL(serverURL())
	if err != nil {
		t.Fatal(err)
	}
	p := queuetest.NewFaultProxy(t, opt.Addr)
	ctx := context.Background()
	open := func(t *testing.T) (q, direct *queue.Queue) {
		t.Helper()
		q, err := queue.Open(ctx, "redis://"+p.Addr()+"/"+strconv.Itoa(opt.DB)+"?queue="+t.Name()[len("TestLostRepliesThroughTheURL/"):]+"&prefix="+prefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = q.Close() })
		return q, mustQueue(t, c, q.Name())
	}
	// lose runs call with the proxy armed to lose one reply.
	lose := func(t *testing.T, q *queue.Queue, call func() error) error {
		t.Helper()
		if _, err := q.Count(ctx); err != nil { // a pooled connection, so that the lost reply is the call's
			t.Fatal(err)
		}
		before := p.Counts().Lost
		p.LoseReplies(1)
		err := call()
		p.LoseReplies(0)
		if p.Counts().Lost != before+1 {
			t.Fatalf("the proxy lost %d replies, want 1", p.Counts().Lost-before)
		}
		return err
	}
	count := func(t *testing.T, q *queue.Queue) int {
		t.Helper()
		n, err := q.Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	getOne := func(t *testing.T, q *queue.Queue) *queue.Message {
		t.Helper()
		ms, err := q.Get(ctx, 1, time.Minute)
		if err != nil || len(ms) != 1 {
			t.Fatalf("Get = %d messages, %v", len(ms), err)
		}
		return ms[0]
	}

	// Load every script the cases send, so that the lost reply is the
	// script's, not a NOSCRIPT answer sent before the server acted (a
	// script changed since the server last ran it).
	warm := mustQueue(t, c, "warm")
	mustPut(t, warm, "a", queue.PutOptions{})
	mustPut(t, warm, "b", queue.PutOptions{})
	if ms, err := warm.Get(ctx, 2, time.Minute); err != nil || len(ms) != 2 {
		t.Fatalf("warm-up Get = %d messages, %v", len(ms), err)
	} else {
		r, err := warm.UpdateVisibility(ctx, ms[0].ID, ms[0].PopReceipt, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := warm.Delete(ctx, ms[0].ID, r); err != nil {
			t.Fatal(err)
		}
		if _, err := warm.DeleteBatch(ctx, []queue.Receipt{{ID: ms[1].ID, PopReceipt: ms[1].PopReceipt}}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("put", func(t *testing.T) {
		q, direct := open(t)
		var id string
		err := lose(t, q, func() (err error) {
			id, err = q.Put(ctx, []byte("once"), queue.PutOptions{})
			return err
		})
		if err != nil && !queue.IsTransient(err) {
			t.Fatalf("Put with its reply lost: %v, want success or a transient error", err)
		}
		if n := count(t, direct); n != 1 {
			t.Fatalf("a put whose reply was lost left %d messages, want 1", n)
		}
		if err == nil {
			if ms, err := direct.Peek(ctx, 1); err != nil || ms[0].ID != id {
				t.Fatalf("Put returned id %s; Peek = %v, %v", id, ms, err)
			}
		}
	})

	t.Run("update", func(t *testing.T) {
		q, direct := open(t)
		mustPut(t, direct, "x", queue.PutOptions{})
		m := getOne(t, q)
		var r string
		err := lose(t, q, func() (err error) {
			r, err = q.UpdateVisibility(ctx, m.ID, m.PopReceipt, time.Minute)
			return err
		})
		switch {
		case errors.Is(err, queue.ErrReceiptMismatch):
			t.Fatalf("UpdateVisibility with its reply lost: %v, though the update happened", err)
		case err != nil && !queue.IsTransient(err):
			t.Fatalf("UpdateVisibility with its reply lost: %v, want success or a transient error", err)
		case err == nil:
			if err := q.Delete(ctx, m.ID, r); err != nil {
				t.Fatalf("Delete with the receipt of the update: %v", err)
			}
		}
	})

	t.Run("delete", func(t *testing.T) {
		q, direct := open(t)
		mustPut(t, direct, "x", queue.PutOptions{})
		m := getOne(t, q)
		err := lose(t, q, func() error { return q.Delete(ctx, m.ID, m.PopReceipt) })
		if err != nil && !queue.IsTransient(err) {
			t.Fatalf("Delete with its reply lost: %v, want success or a transient error (it deleted)", err)
		}
		if n := count(t, direct); n != 0 {
			t.Fatalf("after the delete the queue holds %d messages", n)
		}
		if err := q.Delete(ctx, m.ID, m.PopReceipt); !errors.Is(err, queue.ErrNotFound) {
			t.Fatalf("Delete sent again by the caller: %v, want ErrNotFound", err)
		}
	})

	t.Run("deletebatch", func(t *testing.T) {
		q, direct := open(t)
		for range 3 {
			mustPut(t, direct, "batch", queue.PutOptions{})
		}
		got, err := q.Get(ctx, 3, time.Minute)
		if err != nil || len(got) != 3 {
			t.Fatalf("Get = %d messages, %v", len(got), err)
		}
		var rs []queue.Receipt
		for _, m := range got {
			rs = append(rs, queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
		}
		var res []error
		err = lose(t, q, func() (err error) {
			res, err = q.DeleteBatch(ctx, rs)
			return err
		})
		if err != nil {
			t.Fatalf("DeleteBatch refused as a whole: %v", err)
		}
		for i, e := range res {
			if e != nil && !queue.IsTransient(e) {
				t.Errorf("DeleteBatch with its reply lost, receipt %d: %v, want success or a transient error (it deleted)", i, e)
			}
		}
		if n := count(t, direct); n != 0 {
			t.Fatalf("after the batch delete the queue holds %d messages", n)
		}
	})
}
