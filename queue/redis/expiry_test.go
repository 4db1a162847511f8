package redis_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/queue"
)

// TestExpiredMessagesLeaveNoKeys: on the server's clock every message hash
// expires in Redis at its message's expiry, to the millisecond, and keeps
// that expiry through gets and visibility updates; the queue's sorted sets
// expire with the last message, and the wake-up marker soon after. Then,
// with no call on the queue at all, the server (the test's own, so that
// DBSIZE and KEYS see only this test) reclaims every key of the expired
// messages (issue 25: 500 expired messages left 504 keys, 2.8 MiB, until
// someone touched the queue). A queue that holds a message without TTL
// keeps that message's hash and its two sorted sets (the expired message's
// id stays in them, uncounted, until a call sweeps it).
func TestExpiredMessagesLeaveNoKeys(t *testing.T) {
	s := startServer(t, "--hz", "100")
	prefix := testPrefix()
	ctx := context.Background()
	q, err := queue.Open(ctx, s.URL("expiry", prefix, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	forever, err := queue.Open(ctx, s.URL("forever", prefix, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer forever.Close()
	base := prefix + "{expiry}:"
	const ttl = 2 * time.Second
	body := strings.Repeat("x", 4096)
	for range 200 {
		mustPut(t, q, body, queue.PutOptions{TTL: ttl})
	}
	keep := mustPut(t, forever, "no ttl", queue.PutOptions{TTL: queue.NoExpiry})
	mustPut(t, forever, "with ttl", queue.PutOptions{TTL: ttl})

	// The hash's expiry is the message's, and stays so through a get and
	// a visibility update.
	want := func(m *queue.Message) time.Time { return time.UnixMilli(m.ExpiresAt.UnixMicro() / 1000) }
	check := func(what string, m *queue.Message) {
		t.Helper()
		at, err := s.expireTime(base + "m:" + m.ID)
		if err != nil {
			t.Fatalf("%s: the hash of %s: %v", what, m.ID, err)
		}
		if !at.Equal(want(m)) {
			t.Fatalf("%s: the hash of %s expires at %s, want the message's expiry %s", what, m.ID, at, want(m))
		}
	}
	peeked, err := q.Peek(ctx, 32)
	if err != nil || len(peeked) != 32 {
		t.Fatalf("Peek = %d, %v", len(peeked), err)
	}
	for _, m := range peeked {
		check("after put", m)
	}
	got, err := q.Get(ctx, 2, time.Minute)
	if err != nil || len(got) != 2 {
		t.Fatalf("Get = %d, %v", len(got), err)
	}
	check("after get", got[0])
	if _, err := q.UpdateVisibility(ctx, got[1].ID, got[1].PopReceipt, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	check("after update", got[1])
	all, err := s.rdb.ZRangeWithScores(ctx, base+"x", -1, -1).Result()
	if err != nil || len(all) != 1 {
		t.Fatalf("the expiry set's last: %v, %v", all, err)
	}
	last := time.UnixMilli(int64(all[0].Score) / 1000)

	// The sorted sets expire after the last message, by less than an
	// eighth of its TTL; the marker within a minute of the last put.
	for _, k := range []string{"z", "x"} {
		at, err := s.expireTime(base + k)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if at.Before(last) || at.After(last.Add(ttl/8+time.Millisecond)) {
			t.Errorf("%s expires at %s: want after the last message's expiry %s, within %s of it", k, at, last, ttl/8)
		}
	}
	if at, err := s.expireTime(base + "w"); err != nil || at.IsZero() || at.After(s.now().Add(time.Minute+time.Second)) {
		t.Errorf("the marker expires at %v (%v): want within a minute", at, err)
	}
	for _, k := range []string{"z", "x"} {
		if at, err := s.expireTime(prefix + "{forever}:" + k); err != nil || !at.IsZero() {
			t.Errorf("%s of a queue with a message without TTL expires at %v (%v): want never", k, at, err)
		}
	}
	if at, err := s.expireTime(prefix + "{forever}:m:" + keep); err != nil || !at.IsZero() {
		t.Errorf("the hash of a message without TTL expires at %v (%v): want never", at, err)
	}

	// No call on the queue from here: the server reclaims on its own. The
	// wait is bounded by the server's clock, which decides the expiry.
	deadline := last.Add(ttl/8 + 30*time.Second)
	wantLeft := []string{prefix + "{forever}:m:" + keep, prefix + "{forever}:x", prefix + "{forever}:z"}
	slices.Sort(wantLeft)
	var left []string
	testutil.Eventually(t, time.Minute, "the keys of the expired messages are gone", func() bool {
		left = slices.DeleteFunc(s.Keys(prefix), func(k string) bool { return strings.HasSuffix(k, "}:w") })
		if s.now().After(deadline) {
			return true
		}
		slices.Sort(left)
		return slices.Equal(left, wantLeft)
	})
	if !slices.Equal(left, wantLeft) {
		var desc []string
		for _, k := range left {
			at, err := s.expireTime(k)
			desc = append(desc, fmt.Sprintf("%s (expires %v %v)", k, at, err))
		}
		t.Fatalf("30 s after the last expiry, by the server's clock, these keys remain: %s; want %v", strings.Join(desc, ", "), wantLeft)
	}
	if n, err := forever.Count(ctx); err != nil || n != 1 {
		t.Fatalf("the queue without TTL: Count = %d, %v", n, err)
	}
}
