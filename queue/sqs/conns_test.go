package sqs_test

import (
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/sqs"
	"github.com/adaptq/adaptq/queue/sqs/sqstest"
)

// Client.Close closes the connections of the driver's own HTTP transport
// (the one the SDK really sends on): counted at a loopback proxy, none is
// open after Close. The transport's idle timeout is set to an hour, so
// that nothing but Close closes them, and the proxy never closes a
// client's connection itself. Before the fix Close closed the idle
// connections of a copy of the transport (the SDK's BuildableClient
// hands out copies), and every connection stayed open.
func TestCloseClosesConnections(t *testing.T) {
	t.Parallel()
	srv := sqstest.Shared(t)
	proxy := newFaultProxy(t, srv.Endpoint)
	c, err := sqs.NewClientIdle(ctx, sqs.Config{
		Region: sqstest.NewRegion(), Account: sqstest.Account, Endpoint: proxy.URL,
	}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	q := openQueue(t, c, "close-conns")
	fill(t, q, 40) // 8 producers: several connections
	ms, err := q.Get(ctx, 10, time.Minute)
	if err != nil || len(ms) == 0 {
		t.Fatalf("Get: %d messages, %v", len(ms), err)
	}
	// A long poll under way at Close: its connection comes back to the
	// pool after Close, and is closed then.
	empty := openQueue(t, c, "close-conns-empty")
	polled := make(chan error, 1)
	go func() {
		_, err := empty.GetWait(ctx, 1, time.Minute, 2*time.Second)
		polled <- err
	}()
	for { // until the long poll is on the wire
		if r, _ := proxy.Counts(); r[longPoll] > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := proxy.OpenConns(); n < 2 {
		t.Fatalf("%d connections open before Close, want the producers' several", n)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-polled; err != nil {
		t.Fatalf("the long poll under way at Close: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second) // a hang guard: the closes are on their way
	for proxy.OpenConns() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still open after Client.Close", proxy.OpenConns())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := q.Put(ctx, []byte("after"), queue.PutOptions{}); err == nil {
		t.Fatal("Put after Close succeeded")
	}
}
