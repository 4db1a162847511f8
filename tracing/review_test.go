package tracing_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
)

// A put that fits the backend without trace context never fails because
// tracing adds some: on Azure without claim-check, a body just under the
// message limit leaves no room for the metadata envelope, which the
// portable queue's estimate (keys, values, 6 bytes a pair) undercounts.
// The put goes on without the trace context, and the message arrives.
func TestPutAtAzureLimitNotFailedByTraceContext(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Azurite")
	}
	sr := recorded(t)
	ctx := context.Background()
	suffix := time.Now().Format("150405") + "lim"
	q, err := queue.Open(ctx, azuritetest.Start(t).URL("tracelimit"+suffix, "claim_check", "false"))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	// Room for the trace context by the estimate (traceparent: 11 + 55 + 6
	// bytes), none for the envelope's own JSON.
	body := bytes.Repeat([]byte("x"), q.Features().MaxBody-80)
	if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
		t.Fatalf("put of %d bytes (limit %d) with tracing: %v", len(body), q.Features().MaxBody, err)
	}
	ms, err := q.Get(ctx, 1, time.Minute)
	if err != nil || len(ms) != 1 || !bytes.Equal(ms[0].Body, body) {
		t.Fatalf("get: %d messages, %v", len(ms), err)
	}
	if n := len(spans(sr, "send "+q.Name())); n != 1 {
		t.Fatalf("%d producer spans, want 1", n)
	}
}
