package sqlite

// Review of 33691ec (issue 12).

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
)

// Closing the DB under open handles: every call is ErrClosed (as before,
// when the driver's begin checked db.closed), and errors name the driver once.
func TestClosedDB(t *testing.T) {
	db, _, _ := newDB(t)
	q := mustQueue(t, db, "aaa")
	mustPut(t, q, "x", queue.PutOptions{})
	ms := mustGet(t, q, 1, time.Minute)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	errs := map[string]error{}
	_, errs["put"] = q.Put(ctx, []byte("x"), queue.PutOptions{})
	_, errs["get"] = q.Get(ctx, 1, time.Minute)
	errs["delete"] = q.Delete(ctx, ms[0].ID, ms[0].PopReceipt)
	res, err := q.DeleteBatch(ctx, []queue.Receipt{{ID: ms[0].ID, PopReceipt: ms[0].PopReceipt}})
	errs["deletebatch"] = errors.Join(err, errors.Join(res...))
	_, errs["count"] = q.Count(ctx)
	_, errs["sibling"] = q.Sibling(ctx, "bbb")
	for op, err := range errs {
		if !errors.Is(err, queue.ErrClosed) {
			t.Errorf("%s on a closed DB: %v, want ErrClosed", op, err)
		} else if n := strings.Count(err.Error(), "sqlite: "); n != 1 {
			t.Errorf("%s: %q names the driver %d times", op, err, n)
		}
	}
}
