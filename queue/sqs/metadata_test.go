package sqs_test

import (
	"maps"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
	"github.com/adaptq/adaptq/queue/sqs"
	"github.com/adaptq/adaptq/queue/sqs/sqstest"
)

// Metadata travels as String message attributes beside the driver's own,
// which a consumer of the SDK reads as they are; another producer's String
// and Number attributes come to adaptq as metadata, its Binary ones and
// the driver's own do not.
func TestMetadataOnTheWire(t *testing.T) {
	t.Parallel()
	srv := sqstest.Shared(t)
	c := newClient(t, srv, sqs.Config{})
	q := openQueue(t, c, "meta-wire")

	md := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "t1"}
	if _, err := q.Put(ctx, []byte{0, 1}, queue.PutOptions{Metadata: md}); err != nil {
		t.Fatal(err)
	}
	raw := receiveRaw(t, c, q)
	for k, v := range md {
		a := raw.MessageAttributes[k]
		if aws.ToString(a.DataType) != "String" || aws.ToString(a.StringValue) != v {
			t.Errorf("attribute %s = %s %q, want String %q", k, aws.ToString(a.DataType), aws.ToString(a.StringValue), v)
		}
	}
	if aws.ToString(raw.MessageAttributes[sqs.AttrEncoding].StringValue) != "base64" {
		t.Errorf("the driver's own attribute is lost beside metadata: %v", raw.MessageAttributes)
	}
	m := getOne(t, q)
	if !maps.Equal(m.Metadata, md) {
		t.Errorf("metadata came back as %q, want %q", m.Metadata, md)
	}
	deleteOne(t, q, m)

	var d *sqs.Queue
	q.As(&d)
	if _, err := c.API().SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(d.URL()), MessageBody: aws.String("from python"),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"tenant":  {DataType: aws.String("String"), StringValue: aws.String("t2")},
			"retries": {DataType: aws.String("Number"), StringValue: aws.String("3")},
			"blob":    {DataType: aws.String("Binary"), BinaryValue: []byte{1, 2}},
		}}); err != nil {
		t.Fatal(err)
	}
	m = getOne(t, q)
	if want := map[string]string{"tenant": "t2", "retries": "3"}; string(m.Body) != "from python" || !maps.Equal(m.Metadata, want) {
		t.Errorf("a foreign message: %q with metadata %q, want %q", m.Body, m.Metadata, want)
	}
	deleteOne(t, q, m)
}

// A message SQS's RedrivePolicy moved to its dead-letter queue keeps its
// attributes there: poison.Requeue, reading it as a bare poison message,
// puts it back with its metadata.
func TestRequeueFromARedriveQueueKeepsTheMetadata(t *testing.T) {
	t.Parallel()
	srv := sqstest.Shared(t)
	c := newClient(t, srv, sqs.Config{})
	dlq := openQueue(t, c, "meta-dlq")
	var dd *sqs.Queue
	dlq.As(&dd)
	attrs, err := c.API().GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(dd.URL()), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.API().CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("meta-redriven"), Attributes: map[string]string{
		"RedrivePolicy": `{"deadLetterTargetArn":"` + attrs.Attributes["QueueArn"] + `","maxReceiveCount":"1"}`,
	}}); err != nil {
		t.Fatal(err)
	}
	q := openQueue(t, c, "meta-redriven")
	md := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "t1"}
	if _, err := q.Put(ctx, []byte{0, 1, 2}, queue.PutOptions{Metadata: md}); err != nil {
		t.Fatal(err)
	}
	// One receive, released: the next receive is over maxReceiveCount and
	// SQS moves the message.
	m := getOne(t, q)
	if _, err := q.UpdateVisibility(ctx, m.ID, m.PopReceipt, 0); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if ms, err := q.Get(ctx, 1, 30*time.Second); err != nil || len(ms) != 0 {
			t.Fatalf("Get past maxReceiveCount = %d, %v; want the message moved", len(ms), err)
		}
		if n, err := dlq.Count(ctx); err == nil && n == 1 {
			break
		}
	}
	res, err := poison.Requeue(ctx, dlq, func(string) (*queue.Queue, error) { return q, nil }, poison.Selection{All: true})
	if err != nil || len(res.Done) != 1 {
		t.Fatalf("Requeue = %+v, %v", res, err)
	}
	m = getOne(t, q)
	if string(m.Body) != "\x00\x01\x02" || !maps.Equal(m.Metadata, md) {
		t.Fatalf("requeued %q with metadata %q, want %q", m.Body, m.Metadata, md)
	}
	deleteOne(t, q, m)
}
