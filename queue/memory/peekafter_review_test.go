package memory_test

import (
	"context"
	"runtime"
	"testing"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
)

// A poison listing pages with PeekAfter so that a page costs what its size
// does (issue 26 item 3). The memory driver collected every visible message
// after the cursor and sorted them all for each page: a page of one from
// 200,000 messages allocated a slice of all of them. A page keeps only its
// own.
func TestPeekAfterHoldsOnlyItsPage(t *testing.T) {
	ctx := context.Background()
	q, err := memory.NewStore().Queue("orders-poison")
	if err != nil {
		t.Fatal(err)
	}
	const n = 200_000
	for range n {
		if _, err := q.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ms, err := q.PeekAfter(ctx, "", 1)
	runtime.ReadMemStats(&after)
	if err != nil || len(ms) != 1 || ms[0].ID != "1" {
		t.Fatalf("PeekAfter(\"\", 1) = %v, %v; want message 1", ms, err)
	}
	if a := after.TotalAlloc - before.TotalAlloc; a > 64<<10 {
		t.Errorf("a page of 1 from %d messages allocated %d KiB; want at most 64 KiB", n, a>>10)
	}
}
