package sqs_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/queue/sqs"
	"github.com/adaptq/adaptq/queue/sqs/sqstest"
)

// receiveRaw receives one message with the SDK, as a consumer in another
// language would, and releases it.
func receiveRaw(t *testing.T, c *sqs.Client, q *queue.Queue) types.Message {
	t.Helper()
	var d *sqs.Queue
	if !q.As(&d) {
		t.Fatal("As gave no *sqs.Queue")
	}
	out, err := c.API().ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(d.URL()), MessageAttributeNames: []string{"All"}, VisibilityTimeout: 1})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("raw receive: %d messages, %v", len(out.Messages), err)
	}
	m := out.Messages[0]
	if _, err := c.API().ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(d.URL()), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
		t.Fatal(err)
	}
	return m
}

// Text bodies travel as they are and others in base64, marked; a message
// from a producer that knows nothing of adaptq is read as text; the
// largest text SQS takes round-trips; what SQS refuses as too large is
// ErrTooLarge.
func TestBodiesOnTheWire(t *testing.T) {
	t.Parallel()
	srv := sqstest.Shared(t)
	c := newClient(t, srv, sqs.Config{})
	q := openQueue(t, c, "wire")

	if _, err := q.Put(ctx, []byte(`{"order":1}`), queue.PutOptions{TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	raw := receiveRaw(t, c, q)
	if aws.ToString(raw.Body) != `{"order":1}` {
		t.Errorf("a JSON body went as %q", aws.ToString(raw.Body))
	}
	if _, ok := raw.MessageAttributes[sqs.AttrEncoding]; ok {
		t.Error("a text body is marked as encoded")
	}
	if v := raw.MessageAttributes[sqs.AttrTTL].StringValue; aws.ToString(v) != "3600000" {
		t.Errorf("TTL attribute = %v, want 3600000 (ms)", aws.ToString(v))
	}
	m := getOne(t, q)
	deleteOne(t, q, m)

	bin := []byte{0, 1, 2, 0xff, 'x'}
	if _, err := q.Put(ctx, bin, queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	raw = receiveRaw(t, c, q)
	if aws.ToString(raw.Body) != base64.StdEncoding.EncodeToString(bin) || aws.ToString(raw.MessageAttributes[sqs.AttrEncoding].StringValue) != "base64" {
		t.Errorf("a binary body went as %q with %v", aws.ToString(raw.Body), raw.MessageAttributes)
	}
	if m := getOne(t, q); !bytes.Equal(m.Body, bin) {
		t.Errorf("binary body came back as %q", m.Body)
	} else {
		deleteOne(t, q, m)
	}

	// Another producer's message, no attributes of ours: text, no expiry.
	var d *sqs.Queue
	q.As(&d)
	if _, err := c.API().SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(d.URL()), MessageBody: aws.String("from python")}); err != nil {
		t.Fatal(err)
	}
	m = getOne(t, q)
	if string(m.Body) != "from python" || !m.ExpiresAt.IsZero() || m.DequeueCount != 1 || m.InsertedAt.IsZero() {
		t.Errorf("a foreign message: %q, expires %s, dequeue count %d, inserted %s", m.Body, m.ExpiresAt, m.DequeueCount, m.InsertedAt)
	}
	deleteOne(t, q, m)

	// Text up to what a 1 MiB message holds besides our attributes.
	big := strings.Repeat("a", q.MaxBodySize())
	if _, err := q.Put(ctx, []byte(big), queue.PutOptions{}); err != nil {
		t.Fatalf("text of %d bytes: %v", len(big), err)
	}
	if m := getLarge(t, q); len(m.Body) != len(big) {
		t.Fatalf("big body came back with %d bytes", len(m.Body))
	} else {
		deleteOne(t, q, m)
	}
	// SQS's own refusal maps to ErrTooLarge: a queue whose
	// MaximumMessageSize shrank after it was opened.
	if _, err := c.API().SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(d.URL()),
		Attributes: map[string]string{"MaximumMessageSize": "1024"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Put(ctx, []byte(strings.Repeat("b", 2000)), queue.PutOptions{}); !errors.Is(err, queue.ErrTooLarge) {
		t.Fatalf("a body SQS refuses as too large: %v, want ErrTooLarge", err)
	}
	small := openQueue(t, c, "wire")
	if got := small.MaxBodySize(); got != (1024-256)/4*3 {
		t.Fatalf("MaxBody of a queue with MaximumMessageSize 1024 = %d", got)
	}
	// Delays and visibilities beyond SQS's are refused, unsent.
	if _, err := q.Put(ctx, []byte("x"), queue.PutOptions{InitialVisibilityDelay: 16 * time.Minute}); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("a 16-minute delay: %v, want ErrInvalidArgument", err)
	}
	if _, err := q.Get(ctx, 1, 13*time.Hour); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("a 13-hour visibility: %v, want ErrInvalidArgument", err)
	}
}

func getOne(t *testing.T, q *queue.Queue) *queue.Message {
	t.Helper()
	ms, err := q.Get(ctx, 1, 30*time.Second)
	if err != nil || len(ms) != 1 {
		t.Fatalf("Get = %d, %v", len(ms), err)
	}
	return ms[0]
}

// getLarge gets one large message. On a loaded machine the read of a
// ~770 KiB answer has once failed midway (a transient error); the message
// then reappears after its visibility timeout, and is got again.
func getLarge(t *testing.T, q *queue.Queue) *queue.Message {
	t.Helper()
	for try := 1; ; try++ {
		ms, err := q.Get(ctx, 1, time.Second)
		if err == nil && len(ms) == 1 {
			return ms[0]
		}
		if try == 3 || (err != nil && !queue.IsTransient(err)) {
			t.Fatalf("Get of a large message = %d, %v", len(ms), err)
		}
		t.Logf("Get of a large message, try %d: %d, %v", try, len(ms), err)
		time.Sleep(2 * time.Second)
	}
}

func deleteOne(t *testing.T, q *queue.Queue, m *queue.Message) {
	t.Helper()
	if err := q.Delete(ctx, m.ID, m.PopReceipt); err != nil {
		t.Fatal(err)
	}
}

// Releases go in ChangeMessageVisibilityBatch calls of up to 10: 12
// releases are 2 billed calls, each result what UpdateVisibility would
// give.
func TestUpdateVisibilityBatch(t *testing.T) {
	t.Parallel()
	srv := sqstest.Shared(t)
	c := newClient(t, srv, sqs.Config{})
	m := meterOf(t)
	q := openQueue(t, c, "release", queue.WithObserver(m))
	other := openQueue(t, c, "release-other")
	fill(t, q, 12)
	var rs []queue.Receipt
	for len(rs) < 12 {
		ms, err := q.Get(ctx, 10, time.Minute)
		if err != nil || len(ms) == 0 {
			t.Fatalf("Get: %d, %v", len(ms), err)
		}
		for _, m := range ms {
			rs = append(rs, queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
		}
	}
	fill(t, other, 1)
	om := getOne(t, other)
	rs = append(rs, queue.Receipt{ID: om.ID, PopReceipt: om.PopReceipt})
	before := m.Snapshot()
	nr, res, err := q.UpdateVisibilityBatch(ctx, rs, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 12; i++ {
		if res[i] != nil || nr[i] != rs[i].PopReceipt {
			t.Fatalf("release %d: %q, %v", i, nr[i], res[i])
		}
	}
	if !errors.Is(res[12], queue.ErrNotFound) {
		t.Fatalf("another queue's receipt: %v, want ErrNotFound", res[12])
	}
	if d := m.Snapshot().Sub(before); d.Calls[meter.Update] != 2 {
		t.Fatalf("%d update calls for 12 releases, want 2", d.Calls[meter.Update])
	}
	got := 0
	for got < 12 {
		ms, err := q.Get(ctx, 10, time.Minute)
		if err != nil || len(ms) == 0 {
			t.Fatalf("after the release got %d of 12: %v", got, err)
		}
		for _, m := range ms {
			if m.DequeueCount != 2 {
				t.Errorf("released message got with dequeue count %d, want 2", m.DequeueCount)
			}
		}
		got += len(ms)
	}
	// A stale receipt (the first get's, after the second get) is refused.
	_, res, err = q.UpdateVisibilityBatch(ctx, rs[:1], 0)
	if err != nil || !errors.Is(res[0], queue.ErrReceiptMismatch) {
		t.Fatalf("a stale receipt: %v, %v; want ErrReceiptMismatch", res, err)
	}
}

func meterOf(t *testing.T) *meter.Meter { t.Helper(); return meter.New(sqs.PricePer10k) }

// Text outside the Basic Multilingual Plane (emoji: four bytes of UTF-8,
// a surrogate pair in UTF-16) is text SQS takes, but fauxqs refuses it
// (InvalidMessageContents: its check reads UTF-16 code units), so such a
// body travels in base64, marked with AttrEncoding, and round-trips; text
// within the plane stays byte for byte as it is.
func TestBodiesBeyondTheBMP(t *testing.T) {
	t.Parallel()
	srv := sqstest.Shared(t)
	c := newClient(t, srv, sqs.Config{})
	q := openQueue(t, c, "bmp")
	for _, tc := range []struct {
		body    string
		encoded bool
	}{
		{`{"note":"pizza 🍕 for Zoë"}`, true},
		{"\U00010000", true},
		{"\U0010FFFF last", true},
		{"Zoë, 日本語, \uE000\uFFFD\uD7FF", false},
		{"tab\tnewline\ncr\r", false},
	} {
		if _, err := q.Put(ctx, []byte(tc.body), queue.PutOptions{}); err != nil {
			t.Fatalf("Put(%q): %v", tc.body, err)
		}
		raw := receiveRaw(t, c, q)
		enc := aws.ToString(raw.MessageAttributes[sqs.AttrEncoding].StringValue)
		switch {
		case tc.encoded && (enc != "base64" || aws.ToString(raw.Body) != base64.StdEncoding.EncodeToString([]byte(tc.body))):
			t.Errorf("%q went as %q, encoding %q; want base64, marked", tc.body, aws.ToString(raw.Body), enc)
		case !tc.encoded && (enc != "" || aws.ToString(raw.Body) != tc.body):
			t.Errorf("%q went as %q, encoding %q; want it as it is", tc.body, aws.ToString(raw.Body), enc)
		}
		m := getOne(t, q)
		if string(m.Body) != tc.body {
			t.Errorf("%q came back as %q", tc.body, m.Body)
		}
		deleteOne(t, q, m)
	}
}
