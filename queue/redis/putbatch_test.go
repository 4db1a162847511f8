package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
)

// TestResentPutBatchDoesNotResurrect: a batch put whose first send stored
// its three messages and whose reply was lost, sent again after a
// consumer deleted one, batch-deleted another and still holds the third,
// stores nothing again: the deleted stay gone (handled once), the held one
// stays hidden under the consumer's receipt with its dequeue count.
func TestResentPutBatchDoesNotResurrect(t *testing.T) {
	e := newResendEnv(t, "resurrect-batch")
	ctx := context.Background()
	// Load the batch script (a NOSCRIPT answer would be the reply held).
	if res, err := e.q.PutBatch(ctx, []queue.PutMessage{{Body: []byte("warm")}}); err != nil || res[0].Err != nil {
		t.Fatalf("PutBatch = %v, %v", res, err)
	}
	warm := e.getOne(t, "")
	if err := e.direct.Delete(ctx, warm.ID, warm.PopReceipt); err != nil {
		t.Fatal(err)
	}
	release, err := e.p.HoldReplies()
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		res []queue.PutResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := e.q.PutBatch(ctx, []queue.PutMessage{{Body: []byte("a")}, {Body: []byte("b")}, {Body: []byte("c"), Opts: queue.PutOptions{TTL: time.Hour}}})
		done <- result{res, err}
	}()
	eventually(t, time.Minute, "the first send's reply is held", func() bool { return e.p.Counts().Held > 0 })
	ms, err := e.direct.Get(ctx, 10, time.Hour)
	if err != nil || len(ms) != 3 {
		t.Fatalf("Get = %d messages, %v; want the batch's 3", len(ms), err)
	}
	if err := e.direct.Delete(ctx, ms[0].ID, ms[0].PopReceipt); err != nil {
		t.Fatal(err)
	}
	if res, err := e.direct.DeleteBatch(ctx, []queue.Receipt{{ID: ms[1].ID, PopReceipt: ms[1].PopReceipt}}); err != nil || res[0] != nil {
		t.Fatalf("DeleteBatch = %v, %v", res, err)
	}
	held := ms[2]
	e.p.DropAll() // the reply is lost: the driver sends the batch again
	release()
	r := <-done
	if r.err != nil {
		t.Fatalf("PutBatch = %v", r.err)
	}
	stored := map[string]bool{}
	for _, m := range ms {
		stored[m.ID] = true
	}
	for i, x := range r.res {
		if x.Err != nil && !queue.IsTransient(x.Err) {
			t.Fatalf("message %d: %v, want success or a transient error", i, x.Err)
		}
		if x.Err == nil && !stored[x.ID] {
			t.Errorf("message %d: id %s, not one the first send stored (%v)", i, x.ID, stored)
		}
	}
	if n, err := e.direct.Count(ctx); err != nil || n != 1 {
		t.Errorf("the queue holds %d messages (%v), want the one held", n, err)
	}
	if got, err := e.direct.Get(ctx, 10, time.Hour); err != nil || len(got) != 0 {
		t.Fatalf("after the batch was sent again Get = %d messages (%v): handled twice", len(got), err)
	}
	if _, err := e.direct.UpdateVisibility(ctx, held.ID, held.PopReceipt, 0); errors.Is(err, queue.ErrReceiptMismatch) || errors.Is(err, queue.ErrNotFound) || err != nil {
		t.Fatalf("the consumer's receipt after the batch was sent again: %v", err)
	}
	again := e.getOne(t, held.ID)
	if again.DequeueCount != held.DequeueCount+1 {
		t.Errorf("dequeue count %d after a second get, want %d", again.DequeueCount, held.DequeueCount+1)
	}
	if err := e.direct.Delete(ctx, again.ID, again.PopReceipt); err != nil {
		t.Fatal(err)
	}
	e.wantGone(t, "after the delete")
	e.wantTombstones(t, 5) // the two warm-ups' and the batch's three
}

// TestPutWhoseContextEndsAfterSendingSaysItMayBeStored: a Put or PutBatch
// whose request reached the server (which stored the messages) and whose
// caller's context ended before the reply came (here the connection then
// drops) cannot know what became of the messages: each result must be
// transient ("may have been stored"), never an error that says nothing
// was written. Before the fix the portable queue turned every error of a
// call whose context had ended into a non-transient one, so a put that
// stored its messages reported them as not written.
func TestPutWhoseContextEndsAfterSendingSaysItMayBeStored(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(map[bool]string{false: "Put", true: "PutBatch"}[batch], func(t *testing.T) {
			e := newResendEnv(t, map[bool]string{false: "ctx-put", true: "ctx-batch"}[batch])
			bg := context.Background()
			// Load the batch script (a NOSCRIPT answer would be the reply held).
			if res, err := e.q.PutBatch(bg, []queue.PutMessage{{Body: []byte("warm")}}); err != nil || res[0].Err != nil {
				t.Fatalf("PutBatch = %v, %v", res, err)
			}
			warm := e.getOne(t, "")
			if err := e.direct.Delete(bg, warm.ID, warm.PopReceipt); err != nil {
				t.Fatal(err)
			}
			release, err := e.p.HoldReplies()
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			done := make(chan []error, 1)
			go func() {
				if !batch {
					_, err := e.q.Put(ctx, []byte("a"), queue.PutOptions{})
					done <- []error{err}
					return
				}
				res, err := e.q.PutBatch(ctx, []queue.PutMessage{{Body: []byte("a")}, {Body: []byte("b")}})
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
			eventually(t, time.Minute, "the put's reply is held", func() bool { return e.p.Counts().Held > 0 })
			cancel()      // the caller gives up...
			e.p.DropAll() // ...and the connection fails under the call
			errs := <-done
			release()
			n, err := e.direct.Count(bg)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Fatal("the server stored nothing: the fault did not land after the send")
			}
			for i, err := range errs {
				if err != nil && !queue.IsTransient(err) {
					t.Errorf("message %d: %v, not transient (nothing written), but the queue holds %d message(s)", i, err, n)
				}
			}
		})
	}
}
