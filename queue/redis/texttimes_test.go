package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/redis"
)

// TestExpiryComparedAcrossDigitCounts: the get and delete scripts compare a
// message's expiry with the clock as decimal text (luaAfter), so the cases
// where plain text order and number order differ must still go by number:
// an expiry one digit longer than the clock (999,990 µs against 1,000,010)
// is later, not earlier; an expiry equal to the clock is over; and a
// clock before 1970 (negative µs, an injected clock's) compares by number,
// as does an expiry before 1970 read after it.
func TestExpiryComparedAcrossDigitCounts(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		start time.Time
	}{
		{"longer expiry", time.UnixMicro(999_990)},
		{"negative clock", time.UnixMicro(-1_000_050)},
		{"epoch", clock.Epoch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := clock.NewFake(tc.start)
			c, _ := newClient(t, redis.WithClock(fake))
			q := mustQueue(t, c, "digits")
			id := mustPut(t, q, "live", queue.PutOptions{TTL: 20 * time.Microsecond})

			// Alive: its expiry is 20 µs later, whatever its digit count.
			ms, err := q.Get(ctx, 1, time.Microsecond)
			if err != nil || len(ms) != 1 || ms[0].ID != id {
				t.Fatalf("Get before expiry = %v, %v; want the message", ms, err)
			}
			if err := q.Delete(ctx, id, ms[0].PopReceipt); err != nil {
				t.Fatalf("Delete before expiry: %v", err)
			}

			// At its expiry exactly, a message is over: Get does not
			// return it and Delete finds it gone.
			id = mustPut(t, q, "expires", queue.PutOptions{TTL: 20 * time.Microsecond})
			ms, err = q.Get(ctx, 1, time.Microsecond)
			if err != nil || len(ms) != 1 {
				t.Fatalf("Get = %v, %v; want the message", ms, err)
			}
			fake.Advance(20 * time.Microsecond)
			if err := q.Delete(ctx, id, ms[0].PopReceipt); !errors.Is(err, queue.ErrNotFound) {
				t.Fatalf("Delete at the expiry = %v, want ErrNotFound", err)
			}
			mustPut(t, q, "expires too", queue.PutOptions{TTL: 20 * time.Microsecond})
			fake.Advance(20 * time.Microsecond)
			if ms, err := q.Get(ctx, 1, time.Minute); err != nil || len(ms) != 0 {
				t.Fatalf("Get at the expiry = %v, %v; want none", ms, err)
			}
			if n, err := q.Count(ctx); err != nil || n != 0 {
				t.Fatalf("Count = %d, %v; want 0", n, err)
			}
			if tc.start.UnixMicro() >= 0 {
				return
			}
			// An expiry before 1970 read once the clock is past it: "-1000010"
			// is longer than "10" but earlier.
			id = mustPut(t, q, "expired before 1970", queue.PutOptions{TTL: 20 * time.Microsecond})
			ms, err = q.Get(ctx, 1, time.Microsecond)
			if err != nil || len(ms) != 1 {
				t.Fatalf("Get = %v, %v; want the message", ms, err)
			}
			fake.Set(time.UnixMicro(10))
			if err := q.Delete(ctx, id, ms[0].PopReceipt); !errors.Is(err, queue.ErrNotFound) {
				t.Fatalf("Delete after the expiry = %v, want ErrNotFound", err)
			}
		})
	}
}

// TestReceiptsOfOneGetAreEachMessages: a get of a full batch gives each
// message a receipt of its own (the scripts name the k-th by one
// character, receiptDigits), so that one message's receipt deletes no
// other message of the same get, and each deletes its own.
func TestReceiptsOfOneGetAreEachMessages(t *testing.T) {
	ctx := context.Background()
	c, _ := newClient(t, redis.WithClock(clock.NewFake(clock.Epoch)))
	q := mustQueue(t, c, "receipts")
	for i := range queue.MaxBatchSize {
		mustPut(t, q, fmt.Sprint("m", i), queue.PutOptions{})
	}
	ms, err := q.Get(ctx, queue.MaxBatchSize, time.Minute)
	if err != nil || len(ms) != queue.MaxBatchSize {
		t.Fatalf("Get = %d messages, %v; want %d", len(ms), err, queue.MaxBatchSize)
	}
	seen := map[string]bool{}
	wrong := make([]queue.Receipt, len(ms))
	for i, m := range ms {
		if seen[m.PopReceipt] {
			t.Fatalf("receipt %q given twice", m.PopReceipt)
		}
		seen[m.PopReceipt] = true
		wrong[i] = queue.Receipt{ID: m.ID, PopReceipt: ms[(i+1)%len(ms)].PopReceipt}
	}
	res, err := q.DeleteBatch(ctx, wrong)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range res {
		if !errors.Is(e, queue.ErrReceiptMismatch) {
			t.Fatalf("delete of %s with another message's receipt = %v, want ErrReceiptMismatch", ms[i].ID, e)
		}
	}
	right := make([]queue.Receipt, len(ms))
	for i, m := range ms {
		right[i] = queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt}
	}
	res, err = q.DeleteBatch(ctx, right)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range res {
		if e != nil {
			t.Fatalf("delete of %s with its receipt = %v", ms[i].ID, e)
		}
	}
	if n, err := q.Count(ctx); err != nil || n != 0 {
		t.Fatalf("Count = %d, %v; want 0", n, err)
	}
}

// TestTimesInExponentForm: Redis 7.2.0 to 7.2.4 write a Lua number with
// eight or more trailing zeros in exponent form (fpconv_dtoa: the put
// script's HSET of 1767225600000000 µs, clock.Epoch, stores
// "1.7672256e+15"; redis/redis#13113, fixed by #13115), and such hashes
// stay after an upgrade. The scripts read these times as numbers (earlier
// versions by tonumber): a message put at clock.Epoch with an hour's TTL
// is alive, its get and its delete work, and it expires at its hour.
func TestTimesInExponentForm(t *testing.T) {
	ctx := context.Background()
	fake := clock.NewFake(clock.Epoch)
	c, prefix := newClient(t, redis.WithClock(fake))
	q := mustQueue(t, c, "expform")
	var rdb *goredis.Client
	if !q.As(&rdb) {
		t.Fatal("no go-redis client")
	}
	put := func(body string) string {
		id := mustPut(t, q, body, queue.PutOptions{TTL: time.Hour})
		// As Redis 7.2.0–7.2.4 store clock.Epoch and clock.Epoch + 1 h.
		h := prefix + "{expform}:m:" + id
		if err := rdb.HSet(ctx, h, "i", "1.7672256e+15", "e", "1.7672292e+15").Err(); err != nil {
			t.Fatal(err)
		}
		return id
	}
	a, b := put("a"), put("b")
	ms, err := q.Get(ctx, 2, time.Minute)
	if err != nil || len(ms) != 2 {
		t.Fatalf("Get = %d messages, %v; want both (they expire in an hour)", len(ms), err)
	}
	if err := q.Delete(ctx, a, ms[0].PopReceipt); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	res, err := q.DeleteBatch(ctx, []queue.Receipt{{ID: b, PopReceipt: ms[1].PopReceipt}})
	if err != nil || res[0] != nil {
		t.Fatalf("DeleteBatch = %v, %v", res, err)
	}
	put("c")
	fake.Advance(time.Hour)
	if ms, err := q.Get(ctx, 1, time.Minute); err != nil || len(ms) != 0 {
		t.Fatalf("Get at the expiry = %v, %v; want none", ms, err)
	}
}

// TestTombstoneOfAnExponentFormInsertedTime: on the server's clock a
// delete keeps the id of a message inserted less than TombstoneLife ago
// (so that a late send of its put stores nothing), reading the hash's
// inserted time as a number also in the exponent form of Redis 7.2.0–7.2.4
// (TestTimesInExponentForm). The inserted time written here is the
// multiple of 10⁸ µs next after the server's clock, the form such a
// server writes for a put at that microsecond.
func TestTombstoneOfAnExponentFormInsertedTime(t *testing.T) {
	ctx := context.Background()
	c, prefix := newClient(t)
	q := mustQueue(t, c, "expformtomb")
	var rdb *goredis.Client
	if !q.As(&rdb) {
		t.Fatal("no go-redis client")
	}
	id := mustPut(t, q, "m", queue.PutOptions{})
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ins := strconv.FormatFloat(float64((now.UnixMicro()/1e8+1)*1e8), 'e', -1, 64)
	if err := rdb.HSet(ctx, prefix+"{expformtomb}:m:"+id, "i", ins).Err(); err != nil {
		t.Fatal(err)
	}
	ms, err := q.Get(ctx, 1, time.Minute)
	if err != nil || len(ms) != 1 {
		t.Fatalf("Get = %v, %v; want the message", ms, err)
	}
	if err := q.Delete(ctx, id, ms[0].PopReceipt); err != nil {
		t.Fatal(err)
	}
	kept, err := rdb.SIsMember(ctx, prefix+"{expformtomb}:t:"+id[:8], id).Result()
	if err != nil || !kept {
		t.Fatalf("tombstone of %s (inserted %s) kept = %v, %v; want true", id, ins, kept, err)
	}
}
