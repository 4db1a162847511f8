package postgres

import (
	"context"
	"runtime"
	"testing"

	"github.com/adaptq/adaptq/queue/driver"
)

// maxDeleteAllocsPerReceipt bounds what a DeleteBatch allocates for each
// receipt beyond the first (issue 34): 1.13 measured when pgx encoded the
// []int64 arrays (an interface box for every element above 255), 0.16
// with the arrays written as text.
const maxDeleteAllocsPerReceipt = 0.5

// TestDeleteBatchAllocs: a DeleteBatch of held receipts, alone in its
// group, allocates at most maxDeleteAllocsPerReceipt times per receipt,
// measured as (DeleteBatch of 32 − DeleteBatch of 1) / 31. Background work (the pool, the
// sweep) only adds allocations, so the least of a few measurements is the
// call's own.
func TestDeleteBatchAllocs(t *testing.T) {
	const tries = 5
	pq, rs := heldReceipts(t, "delallocs", 33*tries)
	ctx := context.Background()
	measure := func(batch []driver.Receipt) uint64 {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		res, err := pq.DeleteBatch(ctx, batch)
		runtime.ReadMemStats(&m1)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range res {
			if e != nil {
				t.Fatalf("receipt %d: %v", i, e)
			}
		}
		return m1.Mallocs - m0.Mallocs
	}
	one, many := ^uint64(0), ^uint64(0)
	for i := range tries {
		one = min(one, measure(rs[i*33:i*33+1]))
		many = min(many, measure(rs[i*33+1:i*33+33]))
	}
	per := (float64(many) - float64(one)) / 31
	t.Logf("DeleteBatch of 1: %d allocations, of 32: %d: %.2f per further receipt", one, many, per)
	if per > maxDeleteAllocsPerReceipt {
		t.Fatalf("a DeleteBatch allocates %.2f times per receipt, want at most %.2f", per, maxDeleteAllocsPerReceipt)
	}
}
