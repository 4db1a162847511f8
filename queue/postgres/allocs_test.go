package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// maxGetAllocsPerRow bounds what each further message of a Get allocates
// beyond the first, on messages without metadata: 8.94 measured with pgx
// v5 and the metadata column (issue 31) costing nothing for a NULL; its own
// scan target per row made it 9.94. Issue 34: 3.00 once rows were read
// from their bytes (the body, the id, the receipt), 2.00 with the id and
// the receipt in one string. The bound holds under -race too.
func maxGetAllocsPerRow() float64 {
	return 2.5
}

// TestGetAllocsPerRow: the allocations a Get makes per message it
// returns, measured as (Get of 32 - Get of 1) / 31 on messages without
// metadata, stay within maxGetAllocsPerRow. Background work (the
// sweep, the pool) only adds allocations, so the least of a few
// measurements is the Get's own.
func TestGetAllocsPerRow(t *testing.T) {
	ctx := context.Background()
	db, err := postgres.Open(ctx, pgtest.URL(t), postgres.WithSchema(pgtest.Schema(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q, err := db.Queue(ctx, "allocs")
	if err != nil {
		t.Fatal(err)
	}
	const runs, tries = 20, 3
	putConcurrently(t, q, (32+1)*(runs+1)*tries, queue.PutOptions{})
	get := func(n int) float64 {
		least := 0.0
		for i := range tries {
			a := testing.AllocsPerRun(runs, func() {
				ms, err := q.Get(ctx, n, time.Hour)
				if err != nil || len(ms) != n {
					t.Fatalf("Get(%d) = %d, %v", n, len(ms), err)
				}
			})
			if i == 0 || a < least {
				least = a
			}
		}
		return least
	}
	one, many := get(1), get(32)
	perRow := (many - one) / 31
	t.Logf("Get(1) %.0f allocs, Get(32) %.0f: %.2f per further message", one, many, perRow)
	if perRow > maxGetAllocsPerRow() {
		t.Fatalf("a Get allocates %.2f times per message without metadata, want at most %.2f", perRow, maxGetAllocsPerRow())
	}
}
