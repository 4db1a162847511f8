package postgres

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// TestDeleteBatchOverflowingID: a receipt whose id is no id (a number past
// int64) deletes nothing, in a batch as alone, even when the receipt is
// that of the message with the highest id (the one ParseInt's overflow
// answer names).
func TestDeleteBatchOverflowingID(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, pgtest.URL(t), WithSchema(pgtest.Schema(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pq, err := db.queue(ctx, "overflow")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.pool.Exec(ctx, `ALTER TABLE `+quoteIdent(db.schema)+`.messages ALTER COLUMN id RESTART WITH `+strconv.FormatInt(math.MaxInt64, 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := pq.Put(ctx, []byte("last"), driver.PutOptions{TTL: driver.NoExpiry}); err != nil {
		t.Fatal(err)
	}
	ms, err := pq.Get(ctx, 1, time.Hour)
	if err != nil || len(ms) != 1 || ms[0].ID != strconv.FormatInt(math.MaxInt64, 10) {
		t.Fatalf("Get: %v, %v", ms, err)
	}
	for _, id := range []string{"9223372036854775808", "99999999999999999999"} {
		if err := pq.Delete(ctx, id, ms[0].PopReceipt); !errors.Is(err, queue.ErrNotFound) {
			t.Errorf("Delete(%s): %v, want ErrNotFound", id, err)
		}
		res, err := pq.DeleteBatch(ctx, []driver.Receipt{{ID: id, PopReceipt: ms[0].PopReceipt}})
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(res[0], queue.ErrNotFound) {
			t.Errorf("DeleteBatch(%s): %v, want ErrNotFound", id, res[0])
		}
	}
	if n, err := pq.Count(ctx); err != nil || n != 1 {
		t.Fatalf("Count: %d, %v; want the message still there", n, err)
	}
	res, err := pq.DeleteBatch(ctx, []driver.Receipt{{ID: ms[0].ID, PopReceipt: ms[0].PopReceipt}})
	if err != nil || res[0] != nil {
		t.Fatalf("DeleteBatch with its own id: %v, %v", res, err)
	}
}
