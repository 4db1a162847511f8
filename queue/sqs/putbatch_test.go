package sqs_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/queue/sqs"
	"github.com/adaptq/adaptq/queue/sqs/sqstest"
)

// TestPutBatchOnTheWire: 25 messages go in three SendMessageBatch calls of
// up to 10, billed as three requests; an entry SQS refuses (the queue's
// MaximumMessageSize shrank after it was opened) fails alone with
// ErrTooLarge, its neighbours of the same call stored.
func TestPutBatchOnTheWire(t *testing.T) {
	t.Parallel()
	srv := sqstest.Shared(t)
	c := newClient(t, srv, sqs.Config{})
	m := meter.New(0)
	q := openQueue(t, c, "batch", queue.WithObserver(m))
	in := make([]queue.PutMessage, 25)
	for i := range in {
		in[i].Body = []byte(fmt.Sprint("m", i))
	}
	res, err := q.PutBatch(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || r.ID == "" {
			t.Fatalf("message %d: %+v", i, r)
		}
	}
	if s := m.Snapshot(); s.Calls[meter.PutBatch] != 3 || s.Calls[meter.Put] != 0 || s.MessagesPut != 25 || s.Billed() != 3 {
		t.Fatalf("meter: %v, %d put, %d billed; want 3 batch calls, 25 messages, 3 requests", s.Map(), s.MessagesPut, s.Billed())
	}

	var d *sqs.Queue
	if !q.As(&d) {
		t.Fatal("As gave no *sqs.Queue")
	}
	if _, err := c.API().SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(d.URL()),
		Attributes: map[string]string{"MaximumMessageSize": "1024"}}); err != nil {
		t.Fatal(err)
	}
	res, err = q.PutBatch(ctx, []queue.PutMessage{{Body: []byte("x")}, {Body: []byte(strings.Repeat("b", 2000))}, {Body: []byte("y")}})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[1].Err, queue.ErrTooLarge) || queue.IsTransient(res[1].Err) || res[1].ID != "" {
		t.Errorf("the entry SQS refused: %+v, want ErrTooLarge", res[1])
	}
	if res[0].Err != nil || res[2].Err != nil {
		t.Errorf("its neighbours: %v, %v", res[0].Err, res[2].Err)
	}
	if n, err := q.Count(ctx); err != nil || n != 27 {
		t.Errorf("Count = %d, %v; want 27", n, err)
	}
}
