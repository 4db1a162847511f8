package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
)

// The tests of this file try to lose, duplicate or strand a message
// through issue 34's Get: one IMMEDIATE transaction on the writer, one
// receipt shared by a Get's messages, bodies kept as the driver's copy.

// TestStaleSharedReceiptDeletesNothing: a receipt shared by the messages
// of Get 1 names none of them once Get 2 has taken them again, alone or
// mixed with Get 2's receipts in one DeleteBatch.
func TestStaleSharedReceiptDeletesNothing(t *testing.T) {
	db, c, _ := newDB(t)
	q := mustQueue(t, db, "stale-shared")
	for _, b := range []string{"a", "b", "c"} {
		mustPut(t, q, b, queue.PutOptions{})
	}
	g1 := mustGet(t, q, 3, time.Minute)
	c.Advance(time.Minute) // visible again exactly now
	g2 := mustGet(t, q, 2, time.Minute)
	if bodies(g2) != "a,b" || g2[0].PopReceipt == g1[0].PopReceipt {
		t.Fatalf("second Get: %s with receipt %s (first %s)", bodies(g2), g2[0].PopReceipt, g1[0].PopReceipt)
	}
	for _, m := range g1[:2] {
		if err := q.Delete(ctx, m.ID, g1[0].PopReceipt); !errors.Is(err, queue.ErrReceiptMismatch) {
			t.Fatalf("Delete %s with Get 1's receipt = %v, want ErrReceiptMismatch", m.Body, err)
		}
	}
	// a with Get 1's receipt, b with Get 2's, c (still Get 1's and,
	// visible again, not yet got) with Get 2's, a again with Get 2's.
	res, err := q.DeleteBatch(ctx, []queue.Receipt{
		{ID: g1[0].ID, PopReceipt: g1[0].PopReceipt},
		{ID: g2[1].ID, PopReceipt: g2[1].PopReceipt},
		{ID: g1[2].ID, PopReceipt: g2[0].PopReceipt},
		{ID: g2[0].ID, PopReceipt: g2[0].PopReceipt},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[0], queue.ErrReceiptMismatch) || res[1] != nil ||
		!errors.Is(res[2], queue.ErrReceiptMismatch) || res[3] != nil {
		t.Fatalf("DeleteBatch = %v; want mismatch, nil, mismatch, nil", res)
	}
	// Another queue of the file does not see c, whatever the receipt.
	other := mustQueue(t, db, "stale-shared-other")
	mustPut(t, other, "o", queue.PutOptions{})
	mustGet(t, other, 1, time.Minute)
	res, err = other.DeleteBatch(ctx, []queue.Receipt{{ID: g1[2].ID, PopReceipt: g1[2].PopReceipt}})
	if err != nil || !errors.Is(res[0], queue.ErrNotFound) {
		t.Fatalf("DeleteBatch of c on another queue = %v, %v; want not found", res, err)
	}
	if err := q.Delete(ctx, g1[2].ID, g1[2].PopReceipt); err != nil {
		t.Fatalf("c with its own receipt: %v", err)
	}
	if n, err := q.Count(ctx); err != nil || n != 0 {
		t.Fatalf("Count = %d, %v; want 0", n, err)
	}
}

// TestReceiptsDifferAcrossReopens: every Get draws a receipt of its own,
// also after the file is closed and opened again (ids are never reused:
// a receipt must not be either).
func TestReceiptsDifferAcrossReopens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	c := clock.NewFake(clock.Epoch)
	seen := map[string]bool{}
	for range 3 {
		db, err := Open(path, WithClock(c))
		if err != nil {
			t.Fatal(err)
		}
		q := mustQueue(t, db, "reopen")
		for range 10 {
			mustPut(t, q, "x", queue.PutOptions{})
			ms := mustGet(t, q, 1, time.Minute)
			if len(ms) != 1 {
				t.Fatalf("got %d messages, want 1", len(ms))
			}
			if seen[ms[0].PopReceipt] {
				t.Fatalf("receipt %s drawn twice", ms[0].PopReceipt)
			}
			seen[ms[0].PopReceipt] = true
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBodiesByteForByte: binary bodies of every size class (empty, small,
// across overflow pages) come back byte for byte through many Gets, while
// the consumer scribbles over the bodies it got; bodies kept from earlier
// Gets stay intact through later ones.
func TestBodiesByteForByte(t *testing.T) {
	db, c, _ := newDB(t)
	q := mustQueue(t, db, "bytes")
	r := rand.New(rand.NewPCG(1, 2))
	sizes := []int{0, 1, 7, 200, 4095, 4096, 4097, 65536}
	want := map[string][]byte{}
	for i := range 48 {
		b := make([]byte, sizes[i%len(sizes)])
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		id, err := q.Put(ctx, b, queue.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want[id] = bytes.Clone(b)
		for j := range b {
			b[j] ^= 0xff // the caller's slice is not the stored body
		}
	}
	var kept []*queue.Message
	for round := range 3 {
		got := 0
		for {
			ms := mustGet(t, q, 1+r.IntN(queue.MaxBatchSize), time.Minute)
			if len(ms) == 0 {
				break
			}
			for _, m := range ms {
				got++
				if !bytes.Equal(m.Body, want[m.ID]) {
					t.Fatalf("round %d: body of %s differs (%d bytes, want %d)", round, m.ID, len(m.Body), len(want[m.ID]))
				}
				if round == 0 {
					kept = append(kept, m)
				} else {
					for j := range m.Body {
						m.Body[j] = 0 // a consumer may write into what it got
					}
				}
			}
		}
		if got != len(want) {
			t.Fatalf("round %d: got %d messages, want %d", round, got, len(want))
		}
		c.Advance(time.Minute)
	}
	for _, m := range kept {
		if !bytes.Equal(m.Body, want[m.ID]) {
			t.Fatalf("kept body of %s changed", m.ID)
		}
	}
}

// TestTwoHandlesOnOneFileConsumeOnce: two DBs opened on one file (two
// writers, as two processes would be) drain it together; each message is
// deleted exactly once with its own body, whatever the interleaving of
// their IMMEDIATE transactions. Run with -race.
func TestTwoHandlesOnOneFileConsumeOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "two.db")
	var qs []*queue.Queue
	for range 2 {
		db, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		qs = append(qs, mustQueue(t, db, "two"))
	}
	const n = 300
	want := map[string]string{}
	for i := range n {
		b := fmt.Sprintf("m%04d-%s", i, bytes.Repeat([]byte{byte('a' + i%26)}, i%300))
		want[mustPut(t, qs[i%2], b, queue.PutOptions{})] = b
	}
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		bad  []string
		wg   sync.WaitGroup
	)
	for w := range 4 {
		q := qs[w%2]
		wg.Go(func() {
			for {
				ms, err := q.Get(ctx, 1+w*10, time.Hour)
				if queue.IsTransient(err) {
					continue
				}
				if err != nil {
					mu.Lock()
					bad = append(bad, err.Error())
					mu.Unlock()
					return
				}
				if len(ms) == 0 {
					return
				}
				rs := make([]queue.Receipt, len(ms))
				for i, m := range ms {
					rs[i] = queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt}
				}
				var res []error
				for {
					if res, err = q.DeleteBatch(ctx, rs); !queue.IsTransient(err) {
						break
					}
				}
				mu.Lock()
				if err != nil {
					bad = append(bad, err.Error())
				}
				for i, m := range ms {
					if res != nil && res[i] != nil {
						bad = append(bad, res[i].Error())
					}
					if string(m.Body) != want[m.ID] {
						bad = append(bad, "body of "+m.ID)
					}
					seen[m.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d failures, first %s", len(bad), bad[0])
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("message %s got %d times", id, seen[id])
		}
	}
	if len(seen) != n {
		t.Fatalf("%d messages consumed, want %d", len(seen), n)
	}
}

// TestVisibilityEdges: a message visible exactly now is got; one expiring
// exactly now is not, nor counted, and is purged; one that expires while
// hidden is gone for Delete and UpdateVisibility, and its row is purged.
func TestVisibilityEdges(t *testing.T) {
	db, c, _ := newDB(t)
	q := mustQueue(t, db, "edges")
	mustPut(t, q, "later", queue.PutOptions{InitialVisibilityDelay: 10 * time.Second})
	mustPut(t, q, "short", queue.PutOptions{TTL: 10 * time.Second})
	mustPut(t, q, "hidden", queue.PutOptions{TTL: 20 * time.Second})
	mustPut(t, q, "plain", queue.PutOptions{})
	mustPut(t, q, "never", queue.PutOptions{InitialVisibilityDelay: 4 * time.Second, TTL: 5 * time.Second})
	h := mustGet(t, q, 1, time.Second) // "short"
	if bodies(h) != "short" {
		t.Fatalf("first Get: %s", bodies(h))
	}
	if _, err := q.UpdateVisibility(ctx, h[0].ID, h[0].PopReceipt, 0); err != nil {
		t.Fatal(err)
	}
	hidden := mustGet(t, q, 2, time.Minute)
	if bodies(hidden) != "short,hidden" {
		t.Fatalf("second Get: %s", bodies(hidden))
	}
	c.Advance(10 * time.Second) // "later" visible, "short" expired, exactly now
	ms := mustGet(t, q, 32, time.Minute)
	if bodies(ms) != "plain,later" {
		t.Fatalf("at 10s: %s, want plain,later", bodies(ms))
	}
	if err := q.Delete(ctx, hidden[0].ID, hidden[0].PopReceipt); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Delete of a message that expired while hidden = %v", err)
	}
	c.Advance(10 * time.Second) // "hidden" expires while hidden
	if _, err := q.UpdateVisibility(ctx, hidden[1].ID, hidden[1].PopReceipt, 0); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("UpdateVisibility of a message that expired while hidden = %v", err)
	}
	res, err := q.DeleteBatch(ctx, []queue.Receipt{
		{ID: hidden[1].ID, PopReceipt: hidden[1].PopReceipt},
		{ID: ms[0].ID, PopReceipt: ms[0].PopReceipt},
	})
	if err != nil || !errors.Is(res[0], queue.ErrNotFound) || res[1] != nil {
		t.Fatalf("DeleteBatch = %v, %v; want not found, nil", res, err)
	}
	if n, err := q.Count(ctx); err != nil || n != 1 {
		t.Fatalf("Count = %d, %v; want 1 (later)", n, err)
	}
	c.Advance(2 * purgeInterval)
	mustGet(t, q, 1, time.Minute) // purges
	if n := rawCount(t, db, "messages"); n != 1 {
		t.Fatalf("%d rows in messages after the purge, want 1", n)
	}
	if n := rawCount(t, db, "bodies"); n != 1 {
		t.Fatalf("%d rows in bodies after the purge, want 1", n)
	}
}

// TestGetThatFailsHidesNothing: a Get whose hiding UPDATE fails inside its
// transaction (a trigger aborts it, as a full disk would) returns an error
// and leaves every message visible with its dequeue count; the next Get
// takes them in order. So does a Get that fails on a stored metadata it
// cannot read.
func TestGetThatFailsHidesNothing(t *testing.T) {
	db, _, _ := newDB(t)
	q := mustQueue(t, db, "fails")
	for _, b := range []string{"a", "b", "c"} {
		mustPut(t, q, b, queue.PutOptions{Metadata: map[string]string{"k": b}})
	}
	mustPut(t, q, "d", queue.PutOptions{})
	if _, err := db.w.Exec(`CREATE TRIGGER fail_hide BEFORE UPDATE OF receipt ON messages
		BEGIN SELECT RAISE(ABORT, 'injected'); END`); err != nil {
		t.Fatal(err)
	}
	if ms, err := q.Get(ctx, 4, time.Minute); err == nil {
		t.Fatalf("Get with the UPDATE failing = %d messages, no error", len(ms))
	}
	if _, err := db.w.Exec(`DROP TRIGGER fail_hide`); err != nil {
		t.Fatal(err)
	}
	ps, err := q.Peek(ctx, 32)
	if err != nil || bodies(ps) != "a,b,c,d" {
		t.Fatalf("Peek after the failed Get = %s, %v", bodies(ps), err)
	}
	for _, p := range ps {
		if p.DequeueCount != 0 {
			t.Fatalf("%s: dequeue count %d after a failed Get", p.Body, p.DequeueCount)
		}
	}
	ms := mustGet(t, q, 4, time.Minute)
	if bodies(ms) != "a,b,c,d" {
		t.Fatalf("Get after = %s", bodies(ms))
	}
	for i, m := range ms {
		if m.DequeueCount != 1 {
			t.Fatalf("%s: dequeue count %d", m.Body, m.DequeueCount)
		}
		if i < 3 && m.Metadata["k"] != string(m.Body) {
			t.Fatalf("%s: metadata %v", m.Body, m.Metadata)
		}
		if i == 3 && m.Metadata != nil {
			t.Fatalf("d: metadata %v, want none", m.Metadata)
		}
	}
}

// TestCancelledDeleteBatchUnderLock: a DeleteBatch whose ctx is cancelled
// as it starts, while another connection holds the write lock (the cancel
// lands before the call or during its wait for the lock, whichever comes
// first), fails and deletes nothing, then or later: the messages stay
// deletable with their receipts, and the calls after it are not
// interrupted.
func TestCancelledDeleteBatchUnderLock(t *testing.T) {
	db, _, path := newDB(t)
	q := mustQueue(t, db, "cancel")
	for _, b := range []string{"a", "b"} {
		mustPut(t, q, b, queue.PutOptions{})
	}
	ms := mustGet(t, q, 2, time.Minute)
	other, err := sql.Open("sqlite", dsn(path, "0", SyncNormal, false))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.Begin() // BEGIN IMMEDIATE
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	rs := []queue.Receipt{{ID: ms[0].ID, PopReceipt: ms[0].PopReceipt}, {ID: ms[1].ID, PopReceipt: ms[1].PopReceipt}}
	go func() {
		res, err := q.DeleteBatch(cctx, rs) // a failure of the call is in each result
		if err == nil {
			err = errors.Join(res...)
		}
		done <- err
	}()
	cancel()
	err = <-done
	tx.Rollback()
	if err == nil {
		// It ran before the cancel reached it: both are deleted.
		if n, err := q.Count(ctx); err != nil || n != 0 {
			t.Fatalf("DeleteBatch succeeded but Count = %d, %v", n, err)
		}
		return
	}
	for range 3 { // a late interrupt would fail one of these
		mustPut(t, q, "after", queue.PutOptions{})
	}
	if n, err := q.Count(ctx); err != nil || n != 5 {
		t.Fatalf("Count after a cancelled DeleteBatch = %d, %v; want 5", n, err)
	}
	res, err := q.DeleteBatch(ctx, rs)
	if err != nil || res[0] != nil || res[1] != nil {
		t.Fatalf("DeleteBatch after = %v, %v", res, err)
	}
}

// TestConsumerKilledLosesNothing: a child drains the file with Get and
// DeleteBatch and is killed with SIGKILL mid-stream. Every message is then
// either one the child deleted or one a later consumer gets (hidden ones
// once their visibility timeout has passed): none is got twice, none is
// stranded; only the batch in flight may be deleted without the child
// having said so.
func TestConsumerKilledLosesNothing(t *testing.T) {
	const n = 600
	path := filepath.Join(t.TempDir(), "killed.db")
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q := mustQueue(t, db, helperQueue)
	all := map[string]bool{}
	for i := range n {
		all[mustPut(t, q, fmt.Sprint("m", i), queue.PutOptions{})] = true
	}
	cmd, out := child(t, "consume", path, 0)
	theirs := map[string]int{}
	killed := false
	if err := readIDs(out, func(id string) {
		theirs[id]++
		if len(theirs) == 150 && !killed {
			killed = true
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Error(err)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	werr := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("child did not die of SIGKILL: %v", werr)
	}
	// A consumer whose clock is past every visibility timeout the child set.
	late := clock.NewFake(time.Now().Add(time.Hour))
	db2, err := Open(path, WithClock(late))
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	var check string
	if err := db2.r.QueryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check = %q, %v", check, err)
	}
	q2 := mustQueue(t, db2, helperQueue)
	ours := map[string]int{}
	for {
		ms := mustGet(t, q2, queue.MaxBatchSize, time.Minute)
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			ours[m.ID]++
			if err := q2.Delete(ctx, m.ID, m.PopReceipt); err != nil {
				t.Fatal(err)
			}
		}
	}
	missing := 0
	for id := range all {
		switch {
		case theirs[id]+ours[id] > 1:
			t.Errorf("message %s: deleted by the child %d times, got afterwards %d times", id, theirs[id], ours[id])
		case theirs[id]+ours[id] == 0:
			missing++ // deleted in the batch the kill cut off
		}
	}
	if missing > queue.MaxBatchSize {
		t.Fatalf("%d messages neither deleted by the child nor got afterwards", missing)
	}
	if c, err := q2.Count(ctx); err != nil || c != 0 || rawCount(t, db2, "messages") != 0 || rawCount(t, db2, "bodies") != 0 {
		t.Fatalf("after the drain: Count = %d, %v; %d rows in messages, %d in bodies", c, err,
			rawCount(t, db2, "messages"), rawCount(t, db2, "bodies"))
	}
	t.Logf("child deleted %d, %d got afterwards, %d in the batch cut off", len(theirs), len(ours), missing)
}
