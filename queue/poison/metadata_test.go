package poison_test

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
)

var sampleMetadata = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "Zoë \"q\"\n"}

// The envelope keeps the original's metadata in both versions (verbatim
// and compressed), and the admin JSON shows it.
func TestEnvelopeKeepsTheMetadata(t *testing.T) {
	t.Parallel()
	for _, body := range [][]byte{[]byte("small"), bytes.Repeat([]byte("z"), 5000)} {
		in := sample(body)
		in.Metadata = sampleMetadata
		b, err := poison.Encode(in, 3000) // the large body is compressed
		if err != nil {
			t.Fatal(err)
		}
		out := poison.Decode(&queue.Message{ID: "p", Body: b})
		if !out.Enveloped || !bytes.Equal(out.Body, body) || !maps.Equal(out.Metadata, sampleMetadata) || out.MetadataDropped {
			t.Fatalf("decoded %q with metadata %q (dropped %v), want %q", out.Body, out.Metadata, out.MetadataDropped, sampleMetadata)
		}
		j, err := json.Marshal(out)
		if err != nil {
			t.Fatal(err)
		}
		var back poison.Message
		if err := json.Unmarshal(j, &back); err != nil || !maps.Equal(back.Metadata, sampleMetadata) {
			t.Fatalf("JSON %s lost the metadata: %v", j, err)
		}
	}
	// Without metadata the header has none.
	b, _ := poison.Encode(sample([]byte("x")), 0)
	if bytes.Contains(b, []byte("metadata")) {
		t.Fatalf("an envelope without metadata mentions it: %q", b)
	}
}

// Under a limit too small for the metadata beside the header, the reason
// is cut first, then the metadata is left out and marked dropped: the
// message is still poisoned.
func TestEnvelopeDropsMetadataThatDoesNotFit(t *testing.T) {
	t.Parallel()
	in := sample([]byte("body"))
	in.Metadata = map[string]string{"big": strings.Repeat("v", 2000)}
	b, err := poison.Encode(in, 1000)
	if err != nil {
		t.Fatal(err)
	}
	out := poison.Decode(&queue.Message{ID: "p", Body: b})
	if !out.Enveloped || string(out.Body) != "body" || out.Metadata != nil || !out.MetadataDropped {
		t.Fatalf("decoded %q, metadata %d pairs, dropped %v; want the body, none, dropped", out.Body, len(out.Metadata), out.MetadataDropped)
	}
}

// Requeue puts the metadata back with the body, on every backend.
func TestRequeuePutsTheMetadataBack(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, home, pq *queue.Queue) {
		ctx := context.Background()
		m := sample([]byte("with-meta"))
		m.Metadata = sampleMetadata
		b, err := poison.Encode(m, pq.MaxBodySize())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pq.Put(ctx, b, queue.PutOptions{TTL: queue.NoExpiry}); err != nil {
			t.Fatal(err)
		}
		res, err := poison.Requeue(ctx, pq, onlyOrders(home), poison.Selection{All: true})
		if err != nil || len(res.Done) != 1 {
			t.Fatalf("requeue: %+v, %v", res, err)
		}
		ms, err := home.Get(ctx, 1, time.Minute)
		if err != nil || len(ms) != 1 {
			t.Fatalf("Get = %d, %v", len(ms), err)
		}
		if string(ms[0].Body) != "with-meta" || !maps.Equal(ms[0].Metadata, sampleMetadata) {
			t.Fatalf("requeued %q with metadata %q, want %q", ms[0].Body, ms[0].Metadata, sampleMetadata)
		}
	})
}

// A bare poison message (no envelope: moved by the backend's own redrive,
// as SQS's RedrivePolicy moves a message with its attributes, or put by
// another program) keeps the metadata it came with: Decode shows it and
// Requeue puts it back with it.
func TestRequeueKeepsABareMessagesMetadata(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, home, pq *queue.Queue) {
		ctx := context.Background()
		if _, err := pq.Put(ctx, []byte("redriven"), queue.PutOptions{Metadata: sampleMetadata}); err != nil {
			t.Fatal(err)
		}
		ps, err := pq.Peek(ctx, 1)
		if err != nil || len(ps) != 1 {
			t.Fatalf("Peek = %d, %v", len(ps), err)
		}
		if d := poison.Decode(ps[0]); d.Enveloped || !maps.Equal(d.Metadata, sampleMetadata) {
			t.Fatalf("Decode of a bare message: enveloped %v, metadata %q; want bare with %q", d.Enveloped, d.Metadata, sampleMetadata)
		}
		res, err := poison.Requeue(ctx, pq, onlyOrders(home), poison.Selection{All: true})
		if err != nil || len(res.Done) != 1 {
			t.Fatalf("requeue: %+v, %v", res, err)
		}
		ms, err := home.Get(ctx, 1, time.Minute)
		if err != nil || len(ms) != 1 {
			t.Fatalf("Get = %d, %v", len(ms), err)
		}
		if string(ms[0].Body) != "redriven" || !maps.Equal(ms[0].Metadata, sampleMetadata) {
			t.Fatalf("requeued %q with metadata %q, want %q", ms[0].Body, ms[0].Metadata, sampleMetadata)
		}
	})
}

// Metadata is left out only when the body does not fit beside it even
// compressed: a body that fits verbatim alone but compressed beside the
// metadata is compressed, and the metadata kept for Requeue.
func TestEnvelopeCompressesBeforeDroppingMetadata(t *testing.T) {
	t.Parallel()
	body := bytes.Repeat([]byte("compressible "), 500) // 6,500 bytes
	in := sample(body)
	in.Metadata = map[string]string{"big": strings.Repeat("v", 2000)}
	b, err := poison.Encode(in, 7000)
	if err != nil {
		t.Fatal(err)
	}
	out := poison.Decode(&queue.Message{ID: "p", Body: b})
	if !out.Enveloped || !bytes.Equal(out.Body, body) || !maps.Equal(out.Metadata, in.Metadata) || out.MetadataDropped {
		t.Fatalf("decoded %d bytes (enveloped %v) with %d pairs of metadata (dropped %v); want the %d-byte body with its metadata",
			len(out.Body), out.Enveloped, len(out.Metadata), out.MetadataDropped, len(body))
	}
}
