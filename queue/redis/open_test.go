package redis_test

import (
	"context"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/redis"
)

// TestOpenByURL: queues opened by URL on one database share one Client,
// siblings included, which closes with the last of them.
func TestOpenByURL(t *testing.T) {
	_, prefix := newClient(t)
	ctx := context.Background()
	a, err := queue.Open(ctx, queueURL("url-a", prefix, "&block_timeout=1m"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := queue.Open(ctx, queueURL("url-b", prefix, "&block_timeout=1m"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := a.Sibling(ctx, "url-a-poison")
	if err != nil {
		t.Fatal(err)
	}
	var ca, cb, cs *redis.Client
	if !a.As(&ca) || !b.As(&cb) || !s.As(&cs) || ca != cb || ca != cs {
		t.Fatalf("queues by URL on one database do not share a Client: %p %p %p", ca, cb, cs)
	}
	var rdb *goredis.Client
	if !a.As(&rdb) || rdb != ca.Redis() {
		t.Fatal("As(*goredis.Client) failed")
	}
	f := a.Features()
	if f.Name != "redis" || !f.NativeNotify || f.Durability.String() != "server-memory" || f.MaxBatch != 32 {
		t.Fatalf("Features = %+v", f)
	}
	mustPut(t, s, "p", queue.PutOptions{})
	if n, err := b.Count(ctx); err != nil || n != 0 {
		t.Fatalf("Count(url-b) = %d, %v", n, err)
	}
	for _, q := range []*queue.Queue{a, s} {
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := b.Count(ctx); err != nil || n != 0 {
		t.Fatalf("the last open queue lost its client: %d, %v", n, err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("the shared client is still open after the last queue closed")
	}
	// A new open makes a new client.
	c, err := queue.Open(ctx, queueURL("url-a-poison", prefix, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n, err := c.Count(ctx); err != nil || n != 1 {
		t.Fatalf("Count(url-a-poison) = %d, %v", n, err)
	}
}
