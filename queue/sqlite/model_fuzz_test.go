package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/sqlite"
)

// FuzzMatchesMemory runs a random sequence of queue operations, decoded
// from the fuzzer's bytes, on the SQLite driver and on the memory driver
// (the model) side by side on one fake clock, and requires the same
// answers: the same messages in the same order, the same dequeue counts,
// the same error for every call.
func FuzzMatchesMemory(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 4, 2, 0, 3, 1, 5, 7, 6, 2})
	f.Add([]byte{0, 10, 0, 20, 0, 30, 1, 3, 9, 1, 2, 5, 40, 1, 3, 3, 4, 1, 0})
	f.Add([]byte{0, 1, 1, 1, 8, 200, 1, 1, 2, 0, 2, 1, 3, 0, 6, 6, 5, 1})
	// DeleteBatch: of one Get (one receipt), of two Gets, with a renewed
	// (stale) receipt and repeated ids.
	f.Add([]byte{0, 0, 0, 0, 0, 0, 2, 4, 10, 5, 1, 3, 4, 130, 0, 1, 2, 6, 1})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 2, 3, 10, 2, 3, 10, 4, 131, 0, 2, 1, 3, 6, 1})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 2, 5, 10, 5, 1, 3, 4, 135, 0, 1, 2, 3, 4, 0, 1, 2, 7, 60, 2, 5, 10, 4, 131, 0, 5, 6, 7, 6, 1})
	f.Add([]byte("some longer seed that exercises many operations in a row"))

	dir := f.TempDir()
	c := clock.NewFake(clock.Epoch)
	db, err := sqlite.Open(filepath.Join(dir, "fuzz.db"), sqlite.WithClock(c))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = db.Close() })
	var n atomic.Int64

	f.Fuzz(func(t *testing.T, ops []byte) {
		name := fmt.Sprintf("fuzz-%d", n.Add(1))
		sq, err := db.Queue(name)
		if err != nil {
			t.Fatal(err)
		}
		defer sq.Close()
		mq, err := memory.NewStore(memory.WithClock(c)).Queue(name)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		// Receipts each driver handed out, by body, newest last.
		type held struct{ sID, sR, mID, mR string }
		var holds []held
		bodies := 0
		next := func(i *int) byte {
			if *i >= len(ops) {
				return 0
			}
			b := ops[*i]
			*i++
			return b
		}
		same := func(what string, a, b error) {
			t.Helper()
			for _, target := range []error{queue.ErrNotFound, queue.ErrReceiptMismatch, queue.ErrBatchSize, queue.ErrInvalidArgument, queue.ErrTooLarge} {
				if errors.Is(a, target) != errors.Is(b, target) {
					t.Fatalf("%s: sqlite %v, memory %v", what, a, b)
				}
			}
			if (a == nil) != (b == nil) {
				t.Fatalf("%s: sqlite %v, memory %v", what, a, b)
			}
		}
		for i := 0; i < len(ops) && len(holds) < 500; {
			switch op := next(&i) % 8; op {
			case 0, 1: // put, sometimes delayed or short-lived
				bodies++
				body := []byte(fmt.Sprint("m", bodies))
				o := queue.PutOptions{}
				if x := next(&i); x%4 == 1 {
					o.InitialVisibilityDelay = time.Duration(x%16) * time.Second
				} else if x%4 == 2 {
					o.TTL = time.Duration(1+x%64) * time.Second
				}
				_, e1 := sq.Put(ctx, body, o)
				_, e2 := mq.Put(ctx, body, o)
				same("put", e1, e2)
			case 2, 3: // get
				k := int(next(&i)%34) - 1 // -1..32: out-of-range sizes too
				vis := time.Duration(next(&i)%20) * time.Second
				a, e1 := sq.Get(ctx, k, vis)
				b, e2 := mq.Get(ctx, k, vis)
				same("get", e1, e2)
				if len(a) != len(b) {
					t.Fatalf("get(%d): sqlite %d messages, memory %d", k, len(a), len(b))
				}
				for j := range a {
					if string(a[j].Body) != string(b[j].Body) || a[j].DequeueCount != b[j].DequeueCount ||
						!a[j].NextVisibleAt.Equal(b[j].NextVisibleAt) || !a[j].ExpiresAt.Equal(b[j].ExpiresAt) {
						t.Fatalf("get[%d]: sqlite %q dq %d vis %s, memory %q dq %d vis %s", j,
							a[j].Body, a[j].DequeueCount, a[j].NextVisibleAt, b[j].Body, b[j].DequeueCount, b[j].NextVisibleAt)
					}
					holds = append(holds, held{a[j].ID, a[j].PopReceipt, b[j].ID, b[j].PopReceipt})
				}
			case 4: // delete with some receipt we hold (maybe stale)
				if len(holds) == 0 {
					continue
				}
				x := int(next(&i))
				if x < 128 {
					h := holds[x%len(holds)]
					same("delete", sq.Delete(ctx, h.sID, h.sR), mq.Delete(ctx, h.mID, h.mR))
					continue
				}
				// A DeleteBatch of 1 to 8 holds, current or stale, an id
				// possibly twice, of one Get or several.
				var rs, rm []queue.Receipt
				for range 1 + x%8 {
					h := holds[int(next(&i))%len(holds)]
					rs = append(rs, queue.Receipt{ID: h.sID, PopReceipt: h.sR})
					rm = append(rm, queue.Receipt{ID: h.mID, PopReceipt: h.mR})
				}
				r1, e1 := sq.DeleteBatch(ctx, rs)
				r2, e2 := mq.DeleteBatch(ctx, rm)
				same("delete batch", e1, e2)
				for j := range r1 {
					same(fmt.Sprintf("delete batch[%d] of %d", j, len(rs)), r1[j], r2[j])
				}
			case 5: // update visibility
				if len(holds) == 0 {
					continue
				}
				k := int(next(&i)) % len(holds)
				h := holds[k]
				d := time.Duration(next(&i)%12) * time.Second
				r1, e1 := sq.UpdateVisibility(ctx, h.sID, h.sR, d)
				r2, e2 := mq.UpdateVisibility(ctx, h.mID, h.mR, d)
				same("update", e1, e2)
				if e1 == nil {
					holds = append(holds, held{h.sID, r1, h.mID, r2})
				}
			case 6: // peek and count
				k := 1 + int(next(&i)%32)
				a, e1 := sq.Peek(ctx, k)
				b, e2 := mq.Peek(ctx, k)
				same("peek", e1, e2)
				if len(a) != len(b) {
					t.Fatalf("peek(%d): sqlite %d, memory %d", k, len(a), len(b))
				}
				for j := range a {
					if string(a[j].Body) != string(b[j].Body) || a[j].DequeueCount != b[j].DequeueCount {
						t.Fatalf("peek[%d]: sqlite %q, memory %q", j, a[j].Body, b[j].Body)
					}
				}
				n1, e1 := sq.Count(ctx)
				n2, e2 := mq.Count(ctx)
				same("count", e1, e2)
				if n1 != n2 {
					t.Fatalf("count: sqlite %d, memory %d", n1, n2)
				}
				// Depth (schema 4 adds messages_held's hidden ones to
				// messages_ready's) and PeekAfter's first page.
				d1, e1 := sq.Depth(ctx)
				d2, e2 := mq.Depth(ctx)
				same("depth", e1, e2)
				if d1.Visible != d2.Visible || d1.InFlight != d2.InFlight || !d1.Oldest.Equal(d2.Oldest) {
					t.Fatalf("depth: sqlite %+v, memory %+v", d1, d2)
				}
				a, e1 = sq.PeekAfter(ctx, "", k)
				b, e2 = mq.PeekAfter(ctx, "", k)
				same("peek after", e1, e2)
				if len(a) != len(b) {
					t.Fatalf("peek after(%d): sqlite %d, memory %d", k, len(a), len(b))
				}
				for j := range a {
					if string(a[j].Body) != string(b[j].Body) || a[j].DequeueCount != b[j].DequeueCount {
						t.Fatalf("peek after[%d]: sqlite %q, memory %q", j, a[j].Body, b[j].Body)
					}
				}
			case 7: // time passes
				c.Advance(time.Duration(next(&i)%40) * 250 * time.Millisecond)
			}
		}
	})
}
