package sqs_test

import (
	"errors"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/sqs"
	"github.com/adaptq/adaptq/queue/sqs/sqstest"
)

// skewedClock is the system clock moved by d: a process whose clock is
// wrong.
type skewedClock struct{ d time.Duration }

func (c skewedClock) Now() time.Time { return time.Now().Add(c.d) }

// A consumer whose clock runs a minute fast sees messages that SQS still
// keeps as live (put with a 50 s TTL) and handles them: Get returns them,
// and a renewal, a release and a delete act on them as on any live
// message. None is deleted unrun or left out as expired.
func TestFastClockLosesNothing(t *testing.T) {
	t.Parallel()
	srv := sqstest.Shared(t)
	region := sqstest.NewRegion()
	producer := openQueue(t, newClient(t, srv, sqs.Config{Region: region}), "skew-fast")
	fast := openQueue(t, newClient(t, srv, sqs.Config{Region: region, Clock: skewedClock{time.Minute}}), "skew-fast")
	ids := map[string]bool{}
	for _, b := range []string{"a", "b", "c", "d"} {
		id, err := producer.Put(ctx, []byte(b), queue.PutOptions{TTL: 50 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	ms, err := fast.Get(ctx, 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != len(ids) {
		t.Fatalf("the fast consumer got %d of %d live messages", len(ms), len(ids))
	}
	for _, m := range ms {
		if !ids[m.ID] {
			t.Fatalf("got unknown id %s", m.ID)
		}
	}
	if n, err := producer.Count(ctx); err != nil || n != len(ids) {
		t.Fatalf("after the fast Get SQS holds %d, %v; want all %d", n, err, len(ids))
	}
	// A renewal and a delete of a live message succeed.
	if _, err := fast.UpdateVisibility(ctx, ms[0].ID, ms[0].PopReceipt, time.Minute); err != nil {
		t.Fatalf("renewal of a live message by the fast consumer: %v", err)
	}
	if err := fast.Delete(ctx, ms[1].ID, ms[1].PopReceipt); err != nil {
		t.Fatalf("delete of a live message by the fast consumer: %v", err)
	}
	// A release (the listener's at shutdown) gives the rest back.
	rs := []queue.Receipt{{ID: ms[2].ID, PopReceipt: ms[2].PopReceipt}, {ID: ms[3].ID, PopReceipt: ms[3].PopReceipt}}
	_, res, err := fast.UpdateVisibilityBatch(ctx, rs, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range res {
		if err != nil {
			t.Errorf("release %d of a live message by the fast consumer: %v", i, err)
		}
	}
	again, err := producer.Get(ctx, 10, time.Minute)
	if err != nil || len(again) != 2 {
		t.Fatalf("after the release the producer got %d messages, %v; want the 2 released", len(again), err)
	}
	if n, err := producer.Count(ctx); err != nil || n != 3 {
		t.Fatalf("SQS holds %d, %v; want 3 (one renewed, two released and got again)", n, err)
	}
}

// A consumer whose clock runs a minute slow still never gets a message
// past its TTL: SQS's clock says it expired.
func TestSlowClockGetsNothingExpired(t *testing.T) {
	t.Parallel()
	srv := sqstest.Shared(t)
	region := sqstest.NewRegion()
	producer := openQueue(t, newClient(t, srv, sqs.Config{Region: region}), "skew-slow")
	slow := openQueue(t, newClient(t, srv, sqs.Config{Region: region, Clock: skewedClock{-time.Minute}}), "skew-slow")
	if _, err := producer.Put(ctx, []byte("short"), queue.PutOptions{TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	live, err := producer.Put(ctx, []byte("long"), queue.PutOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond) // SQS's Date has whole seconds
	ms, err := slow.Get(ctx, 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].ID != live {
		var bodies []string
		for _, m := range ms {
			bodies = append(bodies, string(m.Body))
		}
		t.Fatalf("the slow consumer got %q; want only the live message", bodies)
	}
	// Its receipt of the live message is good; renewing it does not
	// report the message expired.
	if _, err := slow.UpdateVisibility(ctx, ms[0].ID, ms[0].PopReceipt, time.Minute); errors.Is(err, queue.ErrNotFound) || err != nil {
		t.Fatalf("renewal of a live message by the slow consumer: %v", err)
	}
}
