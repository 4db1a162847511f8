package queuetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// FaultHarness is one network backend behind a FaultProxy, for RunFaults.
// RunFaults calls its factory once per case.
type FaultHarness struct {
	// Proxy is the FaultProxy in front of the server; the queues Open
	// returns reach the server only through it.
	Proxy *FaultProxy
	// Open opens queue name through the proxy, as a user would: queue.Open
	// with the backend's URL, its host replaced by Proxy.Addr() (unless the
	// driver cannot be reached by URL).
	Open func(ctx context.Context, name string) (*queue.Queue, error)
	// Direct opens the same queue bypassing the proxy, to put a backlog
	// quickly and to check what the server holds.
	Direct func(ctx context.Context, name string) (*queue.Queue, error)

	// Restart, if set, restarts the server (its state kept as the engine
	// keeps it) and returns once it accepts connections again. The Restart
	// case skips without it.
	Restart func(t *testing.T)
	// Restartable, if set, returns a harness on a server of its own whose
	// Restart is set, for the Restart case alone (the others then run on a
	// shared server that must not be restarted).
	Restartable func(t *testing.T) *FaultHarness
	// Skew, if set, makes the client's clock (every clock the driver reads
	// in the process) run d ahead of the server's from now on; Skew(0)
	// undoes it. The harness undoes it when the test ends. The ClockSkew
	// case skips without it.
	Skew func(d time.Duration)
	// Stored, if set, reports how many messages, expired ones included,
	// the server still stores for queue name (rows, hashes …): the
	// ExpiredBacklog case checks their storage is reclaimed.
	Stored func(ctx context.Context, name string) (int, error)
	// GetWork, if set, reports how many stored messages a Get of queue
	// name reads now and discards (expired ones it steps over), measured by
	// the server (PostgreSQL: EXPLAIN ANALYZE's rows removed by filter),
	// never by time. The ExpiredBacklog case checks that an expired backlog
	// costs a Get no such work once it is swept.
	GetWork func(ctx context.Context, name string) (int, error)

	// LazyExpiry, if set, says why the backend reclaims an expired message
	// only when a Get meets it (SQS: the TTL is the driver's, per message,
	// and SQS counts a message until it is deleted). The ExpiredBacklog
	// case then checks that Gets return no expired message, reach the live
	// one put behind the backlog within Backlog / MaxBatch + 2 Gets, and
	// leave Count at 1, instead of reclaiming with no Get.
	LazyExpiry string
	// ShortTTL is the shortest time-to-live the backend honours per
	// message, for the ExpiredBacklog case (0: one second).
	ShortTTL time.Duration
	// Backlog is how many expired messages the ExpiredBacklog case leaves
	// (0: 200).
	Backlog int
	// DrainMessages is how many messages the DropAllMidDrain case drains
	// (0: 1,000).
	DrainMessages int
	// Attempts is how many times in all the driver itself sends a call that
	// is safe to send again after a lost reply (a put under an id it chose,
	// a visibility update under the receipt it chose), for the cases that
	// lose a Put's or UpdateVisibility's reply or drop its request: they arm
	// that many faults, so that the call fails as the case needs and is not
	// hidden by the driver's retries (0: 1, a driver that sends each call
	// once).
	Attempts int

	// Features are what the driver promises (as in Harness).
	Features driver.Features
}

// faultHang guards a wait that should end soon on a healthy driver; no case
// asserts how long anything takes.
const faultHang = 60 * time.Second

// faultTries bounds the attempts a case makes to land a fault on its own
// call (an armed fault can land on a pool's health check or a connection's
// start-up instead).
const faultTries = 10

// RunFaults runs the fault cases, each a subtest named as below, against a
// network driver behind a FaultProxy. Every fault is armed by count or
// bounded by operations, never by a wall-clock rate. Waits on the server's
// clock (a visibility timeout, a TTL) are real: the server keeps its own
// time.
//
//   - LostReplyPut: a Put whose reply is lost after the server stored it
//     fails transiently and leaves at most one message; a Put that
//     returned an id left exactly one message with it.
//   - LostReplyPutBatch: the same for a PutBatch of three: each message
//     is stored at most once, and one whose result has an id exactly once
//     under it; a message it could not confirm fails transiently.
//   - LostReplyGet: a Get whose reply is lost fails transiently; its
//     messages come back after their visibility timeout, none lost.
//   - LostReplyDelete, LostReplyDeleteBatch: the retry of a delete whose
//     reply was lost returns nil or ErrNotFound (never a transient error
//     again, never ErrReceiptMismatch), and the message is gone.
//   - LostReplyUpdateVisibility: fails transiently, not with
//     ErrReceiptMismatch, and the message comes back, none lost.
//     Each lost-reply case tries until the lost reply is one the server sent
//     after it acted, as Direct shows (a message gone, a receipt stale,
//     messages hidden; drivers with lax receipts cannot show it for a
//     delete or a renewal): a reply lost before that (a statement's
//     preparation on a fresh connection) leaves the call undone, and the
//     case would pass without its fault.
//   - DroppedRequest: a request dropped before the server fails
//     transiently and changes nothing.
//   - CancelledMidCall: a DeleteBatch whose caller gives up while replies
//     are held returns, and afterwards deletes neither its own message
//     (if it failed) nor any of the entries the caller then writes into
//     its slice.
//   - ExpiredBacklog: an expired backlog leaves Count, Depth and storage
//     (Stored) with no Get at all, costs a Get no work once swept
//     (GetWork), and a live message put behind it is still got (with
//     LazyExpiry: Gets return none of the backlog, reclaim it, and reach
//     the live message).
//   - ManySubscribedQueues: with 10 × GOMAXPROCS + 2 queues subscribed
//     (NativeNotify), a Put still succeeds and wakes its subscriber.
//   - Restart: after a server restart (on a server of the harness's own
//     where Restartable is set), messages got but not deleted come back,
//     with their dequeue count where the backend syncs before it answers
//     (Durability PowerLoss), and ids put afterwards are new.
//   - ClockSkew: a client whose clock runs 60 s ahead neither hides,
//     deletes nor counts out live messages as expired, nor shows a delayed
//     one early.
//   - DropAllMidDrain: every connection dropped every few calls while
//     consumers drain a queue: every message is got, every error is
//     transient.
func RunFaults(t *testing.T, newHarness func(t *testing.T) *FaultHarness) {
	cases := []struct {
		name string
		fn   func(*testing.T, *faultEnv)
	}{
		{"LostReplyPut", testLostReplyPut},
		{"LostReplyPutBatch", testLostReplyPutBatch},
		{"LostReplyGet", testLostReplyGet},
		{"LostReplyDelete", testLostReplyDelete},
		{"LostReplyDeleteBatch", testLostReplyDeleteBatch},
		{"LostReplyUpdateVisibility", testLostReplyUpdate},
		{"DroppedRequest", testDroppedRequest},
		{"CancelledMidCall", testCancelledMidCall},
		{"ExpiredBacklog", testExpiredBacklog},
		{"ManySubscribedQueues", testManySubscribed},
		{"Restart", testFaultRestart},
		{"ClockSkew", testClockSkew},
		{"DropAllMidDrain", testDropAllMidDrain},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t)
			if h == nil || h.Open == nil || h.Direct == nil || h.Proxy == nil {
				t.Fatal("queuetest: fault harness without Proxy, Open or Direct")
			}
			var b [4]byte
			_, _ = rand.Read(b[:])
			e := &faultEnv{h: h, f: normalize(h.Features), ctx: context.Background(), suffix: hex.EncodeToString(b[:])}
			if h.Skew != nil {
				t.Cleanup(func() { h.Skew(0) })
			}
			c.fn(t, e)
		})
	}
}

// attempts is how many faults a case arms for a call the driver may send
// again by itself.
func (e *faultEnv) attempts() int { return max(e.h.Attempts, 1) }

// faultEnv is one fault case's view of its harness.
type faultEnv struct {
	h      *FaultHarness
	f      driver.Features
	ctx    context.Context
	suffix string // makes queue names unique per run (-count=2, shared servers)
}

// name is a queue name unique to this run.
func (e *faultEnv) name(base string) string { return base + "-" + e.suffix }

// open opens queue name through the proxy, direct bypassing it; both are
// closed when the case ends.
func (e *faultEnv) open(t *testing.T, name string) *queue.Queue {
	t.Helper()
	return e.opened(t, "Open", name, e.h.Open)
}

func (e *faultEnv) direct(t *testing.T, name string) *queue.Queue {
	t.Helper()
	return e.opened(t, "Direct", name, e.h.Direct)
}

func (e *faultEnv) opened(t *testing.T, how, name string, open func(context.Context, string) (*queue.Queue, error)) *queue.Queue {
	t.Helper()
	q, err := open(e.ctx, name)
	if err != nil {
		t.Fatalf("%s(%q): %v", how, name, err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// loseReplyOn calls call on one message after another, each time with the
// next reply lost (lose replies: as many as the driver sends the call),
// until a call fails after the server acted on it, and returns that
// message. The failure must be transient and not refused (the caller
// cannot know whether the call happened); what names the call ("a
// Delete"). acted, if set, tells through Direct whether the failed call
// happened at the server (it may update m to what the server holds now);
// a reply lost before that (a statement's preparation on a connection
// that had not run it yet) leaves the call undone, and the case would then
// pass without its fault: the call is then made again without a fault
// (which readies the connection it takes) and the next message tried.
func (e *faultEnv) loseReplyOn(t *testing.T, what string, lose int, ms []*queue.Message, call func(*queue.Message) error, refused func(error) bool, acted func(*queue.Message) bool) *queue.Message {
	t.Helper()
	early := 0
	for _, m := range ms {
		before := e.h.Proxy.Counts()
		e.h.Proxy.LoseReplies(lose)
		err := call(m)
		e.h.Proxy.LoseReplies(0)
		if err == nil {
			continue // the fault landed elsewhere (a health check)
		}
		if refused(err) || !queue.IsTransient(err) {
			t.Fatalf("%s whose reply was lost failed with %v, want a transient error (the caller cannot know whether it happened)", what, err)
		}
		landed(t, e.h.Proxy, before)
		if acted != nil && !acted(m) {
			early++
			if err := retry(func() error { return call(m) }); err != nil {
				t.Fatalf("%s again, with no fault: %v", what, err)
			}
			continue
		}
		t.Logf("%s failed after the server acted (%d failed before it did)", what, early)
		return m
	}
	t.Fatalf("%d tries of %s, each with a reply lost: none failed after the server acted (%d failed before it did)", len(ms), what, early)
	return nil
}

// stored reports through direct whether the message called id is still
// stored (visible or not): UpdateVisibility with no valid receipt tells a
// message that exists (ErrReceiptMismatch) from one that is gone
// (ErrNotFound). known is false for drivers with lax receipts, which
// cannot tell.
func (e *faultEnv) stored(t *testing.T, direct *queue.Queue, id string) (stored, known bool) {
	t.Helper()
	if e.f.LaxReceipts {
		return false, false
	}
	_, err := direct.UpdateVisibility(e.ctx, id, "0000000000000000", 0)
	switch {
	case errors.Is(err, queue.ErrReceiptMismatch):
		return true, true
	case errors.Is(err, queue.ErrNotFound):
		return false, true
	}
	t.Fatalf("UpdateVisibility(%s) with a receipt nobody has: %v", id, err)
	return false, false
}

// unit is the shortest visibility timeout the cases use on the server's
// clock: a second, or the backend's timestamp resolution if coarser.
func (e *faultEnv) unit() time.Duration { return max(time.Second, e.f.TimeResolution) }

// warm makes one call of each kind a case's faulted call will make on a
// queue of its own, so that the pool holds a connection that has prepared
// its statements (loaded its scripts …): the armed fault then lands on the
// case's call itself, after the server acted, not on a connection's
// start-up.
func (e *faultEnv) warm(t *testing.T, q *queue.Queue) {
	t.Helper()
	w, err := q.Sibling(e.ctx, q.Name()+"-w")
	if errors.Is(err, queue.ErrUnsupported) {
		w, err = e.h.Open(e.ctx, q.Name()+"-w")
	}
	if err != nil {
		t.Fatalf("open the warm-up queue: %v", err)
	}
	defer w.Close()
	for range 2 {
		if _, err := w.Put(e.ctx, []byte("warm"), queue.PutOptions{}); err != nil {
			t.Fatalf("warm-up Put: %v", err)
		}
		ms, err := w.Get(e.ctx, 1, 30*e.unit())
		if err != nil || len(ms) != 1 {
			t.Fatalf("warm-up Get: %d, %v", len(ms), err)
		}
		r, err := w.UpdateVisibility(e.ctx, ms[0].ID, ms[0].PopReceipt, 30*e.unit())
		if err != nil {
			t.Fatalf("warm-up UpdateVisibility: %v", err)
		}
		if _, err := w.DeleteBatch(e.ctx, []queue.Receipt{{ID: ms[0].ID, PopReceipt: r}}); err != nil {
			t.Fatalf("warm-up DeleteBatch: %v", err)
		}
		if _, err := w.Put(e.ctx, []byte("warm"), queue.PutOptions{}); err != nil {
			t.Fatalf("warm-up Put: %v", err)
		}
		if ms, err = w.Get(e.ctx, 1, 30*e.unit()); err != nil || len(ms) != 1 {
			t.Fatalf("warm-up Get: %d, %v", len(ms), err)
		}
		if err := w.Delete(e.ctx, ms[0].ID, ms[0].PopReceipt); err != nil {
			t.Fatalf("warm-up Delete: %v", err)
		}
		if _, err := w.Count(e.ctx); err != nil {
			t.Fatalf("warm-up Count: %v", err)
		}
	}
	if err := w.Clear(e.ctx); err != nil {
		t.Fatalf("warm-up Clear: %v", err)
	}
}

// retry runs op until it succeeds or fails with a non-transient error, at
// most faultTries times (what a consumer's retry loop does after a fault).
func retry(op func() error) error {
	var err error
	for range faultTries {
		if err = op(); err == nil || !queue.IsTransient(err) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// all gets every message of q through direct with a long visibility,
// until a Get returns none: what the server holds that is visible.
func (e *faultEnv) all(t *testing.T, q *queue.Queue) []*queue.Message {
	t.Helper()
	var out []*queue.Message
	for {
		var ms []*queue.Message
		err := retry(func() (err error) {
			ms, err = q.Get(e.ctx, e.f.MaxBatch, 5*time.Minute)
			return err
		})
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if len(ms) == 0 {
			return out
		}
		out = append(out, ms...)
	}
}

// eventually polls cond until it returns nil, failing with its last error
// after faultHang.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(faultHang)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// landed fails the case unless the proxy lost or dropped one more reply or
// request than before.
func landed(t *testing.T, p *FaultProxy, before FaultCounts) {
	t.Helper()
	c := p.Counts()
	if c.Lost+c.Dropped <= before.Lost+before.Dropped {
		t.Fatalf("the armed fault did not land (counts %+v)", c)
	}
}

func testLostReplyPut(t *testing.T, e *faultEnv) {
	name := e.name("lost-put")
	q := e.open(t, name)
	d := e.direct(t, name)
	e.warm(t, q)
	ids := map[string]string{} // body → id, for the puts that returned one
	var failed []string        // bodies of the puts that failed
	for i := 0; i < faultTries && len(failed) == 0; i++ {
		body := fmt.Sprintf("lost-put-%d", i)
		before := e.h.Proxy.Counts()
		e.h.Proxy.LoseReplies(e.attempts())
		id, err := q.Put(e.ctx, []byte(body), queue.PutOptions{})
		e.h.Proxy.LoseReplies(0)
		if err != nil {
			if !queue.IsTransient(err) {
				t.Fatalf("a Put whose reply was lost failed with %v, which is not transient: the caller cannot know to retry", err)
			}
			landed(t, e.h.Proxy, before)
			failed = append(failed, body)
			continue
		}
		ids[body] = id
	}
	if len(failed) == 0 {
		t.Fatalf("no Put failed in %d tries with a reply lost each time", faultTries)
	}
	seen := map[string][]string{} // body → ids stored
	for _, m := range e.all(t, d) {
		seen[string(m.Body)] = append(seen[string(m.Body)], m.ID)
	}
	for body, id := range ids {
		if got := seen[body]; len(got) != 1 || got[0] != id {
			t.Errorf("Put(%q) returned id %s; the server holds %v", body, id, got)
		}
	}
	for _, body := range failed {
		if got := seen[body]; len(got) > 1 {
			t.Errorf("a Put(%q) whose reply was lost left %d messages %v: a put is never duplicated under a new id", body, len(got), got)
		}
	}
}

func testLostReplyGet(t *testing.T, e *faultEnv) {
	name := e.name("lost-get")
	q := e.open(t, name)
	d := e.direct(t, name)
	e.warm(t, q)
	want := map[string]bool{}
	for i := range 3 {
		id, err := d.Put(e.ctx, []byte(fmt.Sprint("m", i)), queue.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want[id] = true
	}
	got := map[string]bool{}
	lost := false
	early := 0
	for i := 0; i < faultTries && !lost; i++ {
		before := e.h.Proxy.Counts()
		e.h.Proxy.LoseReplies(1)
		ms, err := q.Get(e.ctx, e.f.MaxBatch, e.unit())
		e.h.Proxy.LoseReplies(0)
		if err != nil {
			if !queue.IsTransient(err) {
				t.Fatalf("a Get whose reply was lost failed with %v, which is not transient", err)
			}
			landed(t, e.h.Proxy, before)
			if e.f.MaxPeek > 0 {
				// Did the server run it? Then it hid the messages.
				vs, err := d.Peek(e.ctx, len(want))
				if err != nil {
					t.Fatalf("Peek: %v", err)
				}
				if len(vs) == len(want) {
					// The reply lost came before (see loseReplyOn): a Get
					// with no fault readies a connection; try anew.
					early++
					if ms, err = q.Get(e.ctx, e.f.MaxBatch, e.unit()); err != nil {
						t.Fatalf("Get again, with no fault: %v", err)
					}
					for _, m := range ms {
						if _, err := q.UpdateVisibility(e.ctx, m.ID, m.PopReceipt, 0); err != nil {
							t.Fatalf("release: %v", err)
						}
					}
					continue
				}
			}
			t.Logf("a Get failed after the server acted (%d failed before it did)", early)
			lost = true
			break
		}
		// The fault landed elsewhere: let these go again at once.
		for _, m := range ms {
			if _, err := q.UpdateVisibility(e.ctx, m.ID, m.PopReceipt, 0); err != nil {
				t.Fatalf("release: %v", err)
			}
		}
	}
	if !lost {
		t.Fatalf("no Get failed after the server acted in %d tries with a reply lost each time (%d failed before it did)", faultTries, early)
	}
	// What the lost Get hid comes back after its visibility timeout.
	eventually(t, "the messages of a Get whose reply was lost", func() error {
		ms, err := q.Get(e.ctx, e.f.MaxBatch, 5*time.Minute)
		if err != nil && !queue.IsTransient(err) {
			t.Fatalf("Get: %v", err)
		}
		for _, m := range ms {
			got[m.ID] = true
		}
		if len(got) < len(want) {
			return fmt.Errorf("%d of %d messages came back", len(got), len(want))
		}
		return nil
	})
	for id := range want {
		if !got[id] {
			t.Errorf("message %s never came back", id)
		}
	}
}

// heldMessages puts n messages through direct and gets them through q with
// a long visibility timeout.
func (e *faultEnv) heldMessages(t *testing.T, q, direct *queue.Queue, n int) []*queue.Message {
	t.Helper()
	return e.heldFor(t, q, direct, n, 5*time.Minute)
}

// heldFor puts n messages through direct and gets them through q, hidden
// for vis.
func (e *faultEnv) heldFor(t *testing.T, q, direct *queue.Queue, n int, vis time.Duration) []*queue.Message {
	t.Helper()
	for i := range n {
		if _, err := direct.Put(e.ctx, []byte(fmt.Sprint("held-", i)), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var out []*queue.Message
	for len(out) < n {
		ms, err := q.Get(e.ctx, min(e.f.MaxBatch, n-len(out)), vis)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if len(ms) == 0 {
			t.Fatalf("got %d of %d messages", len(out), n)
		}
		out = append(out, ms...)
	}
	return out
}

// wantRetriedDelete checks the retry of a delete whose reply was
// lost.
func (e *faultEnv) wantRetriedDelete(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || errors.Is(err, queue.ErrNotFound) {
		return
	}
	if errors.Is(err, queue.ErrReceiptMismatch) && e.f.LaxReceipts {
		return
	}
	t.Fatalf("%s: %v, want nil or ErrNotFound (the first attempt deleted the message)", what, err)
}

func testLostReplyDelete(t *testing.T, e *faultEnv) {
	name := e.name("lost-delete")
	q := e.open(t, name)
	d := e.direct(t, name)
	e.warm(t, q)
	ms := e.heldMessages(t, q, d, faultTries)
	hit := e.loseReplyOn(t, "a Delete", 1, ms, func(m *queue.Message) error {
		return q.Delete(e.ctx, m.ID, m.PopReceipt)
	}, func(error) bool { return false }, func(m *queue.Message) bool {
		s, known := e.stored(t, d, m.ID)
		return !known || !s
	})
	err := retry(func() error { return q.Delete(e.ctx, hit.ID, hit.PopReceipt) })
	e.wantRetriedDelete(t, "the retried Delete", err)
	e.wantStored(t, d, hit.ID, false)
}

func testLostReplyDeleteBatch(t *testing.T, e *faultEnv) {
	name := e.name("lost-delete-batch")
	q := e.open(t, name)
	d := e.direct(t, name)
	e.warm(t, q)
	ms := e.heldMessages(t, q, d, 3*faultTries)
	var hit []queue.Receipt
	early := 0
	for i := 0; i+3 <= len(ms); i += 3 {
		rs := []queue.Receipt{
			{ID: ms[i].ID, PopReceipt: ms[i].PopReceipt},
			{ID: ms[i+1].ID, PopReceipt: ms[i+1].PopReceipt},
			{ID: ms[i+2].ID, PopReceipt: ms[i+2].PopReceipt},
		}
		before := e.h.Proxy.Counts()
		e.h.Proxy.LoseReplies(1)
		res, err := q.DeleteBatch(e.ctx, rs)
		e.h.Proxy.LoseReplies(0)
		if err != nil {
			t.Fatalf("DeleteBatch: %v", err)
		}
		failed := false
		for j, r := range res {
			if r == nil {
				continue
			}
			if !queue.IsTransient(r) {
				t.Fatalf("receipt %d of a DeleteBatch whose reply was lost failed with %v, which is not transient", j, r)
			}
			failed = true
		}
		if !failed {
			continue
		}
		landed(t, e.h.Proxy, before)
		if s, known := e.stored(t, d, rs[0].ID); known && s {
			// The reply lost came before the server ran the batch (see
			// loseReplyOn): delete again, with no fault, and try anew.
			early++
			if _, err := q.DeleteBatch(e.ctx, rs); err != nil {
				t.Fatalf("DeleteBatch again, with no fault: %v", err)
			}
			continue
		}
		t.Logf("a DeleteBatch failed after the server acted (%d failed before it did)", early)
		hit = rs
		break
	}
	if hit == nil {
		t.Fatalf("no DeleteBatch failed after the server acted in %d tries with a reply lost each time (%d failed before it did)", faultTries, early)
	}
	var res []error
	err := retry(func() (err error) {
		res, err = q.DeleteBatch(e.ctx, hit)
		if err == nil {
			for _, r := range res {
				if queue.IsTransient(r) {
					return r
				}
			}
		}
		return err
	})
	if err != nil {
		t.Fatalf("the retried DeleteBatch: %v", err)
	}
	for i, r := range res {
		e.wantRetriedDelete(t, fmt.Sprintf("receipt %d of the retried DeleteBatch", i), r)
		e.wantStored(t, d, hit[i].ID, false)
	}
}

// wantStored checks through direct whether the message called id is still
// stored (visible or not): UpdateVisibility with no valid receipt tells a
// message that exists (ErrReceiptMismatch) from one that is gone
// (ErrNotFound). Drivers with lax receipts cannot tell; the check is then
// skipped.
func (e *faultEnv) wantStored(t *testing.T, direct *queue.Queue, id string, want bool) {
	t.Helper()
	s, known := e.stored(t, direct, id)
	switch {
	case !known:
	case s && !want:
		t.Errorf("message %s is still stored", id)
	case !s && want:
		t.Errorf("message %s is gone", id)
	}
}

func testLostReplyUpdate(t *testing.T, e *faultEnv) {
	name := e.name("lost-update")
	q := e.open(t, name)
	d := e.direct(t, name)
	e.warm(t, q)
	// Held briefly: an armed fault that lands on a pool's health check
	// fails the call before it reaches the server, and the message then
	// comes back when this runs out.
	ms := e.heldFor(t, q, d, faultTries, 3*e.unit())
	var acted func(*queue.Message) bool
	if !e.f.LaxReceipts {
		// The renewal happened if its receipt is stale now; if not, this
		// renews it instead, and m takes the new receipt.
		acted = func(m *queue.Message) bool {
			r, err := d.UpdateVisibility(e.ctx, m.ID, m.PopReceipt, 3*e.unit())
			if errors.Is(err, queue.ErrReceiptMismatch) {
				return true
			}
			if err != nil {
				t.Fatalf("UpdateVisibility through Direct: %v", err)
			}
			m.PopReceipt = r
			return false
		}
	}
	hit := e.loseReplyOn(t, "an UpdateVisibility", e.attempts(), ms, func(m *queue.Message) error {
		_, err := q.UpdateVisibility(e.ctx, m.ID, m.PopReceipt, e.unit())
		return err
	}, func(err error) bool { return errors.Is(err, queue.ErrReceiptMismatch) }, acted)
	// Whether or not it happened, the message comes back: lost is never
	// the outcome.
	eventually(t, "the message of an UpdateVisibility whose reply was lost", func() error {
		ms, err := d.Get(e.ctx, e.f.MaxBatch, 5*time.Minute)
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m.ID == hit.ID {
				return nil
			}
		}
		return errors.New("not visible again")
	})
}

func testDroppedRequest(t *testing.T, e *faultEnv) {
	name := e.name("dropped")
	q := e.open(t, name)
	d := e.direct(t, name)
	e.warm(t, q)
	dropped := ""
	kept := map[string]string{}
	for i := 0; i < faultTries && dropped == ""; i++ {
		body := fmt.Sprint("dropped-", i)
		before := e.h.Proxy.Counts()
		e.h.Proxy.DropRequests(e.attempts())
		id, err := q.Put(e.ctx, []byte(body), queue.PutOptions{})
		e.h.Proxy.DropRequests(0)
		if err == nil {
			kept[body] = id
			continue
		}
		if !queue.IsTransient(err) {
			t.Fatalf("a Put whose request was dropped failed with %v, which is not transient", err)
		}
		landed(t, e.h.Proxy, before)
		dropped = body
	}
	if dropped == "" {
		t.Fatalf("no Put failed in %d tries with a request dropped each time", faultTries)
	}
	for _, m := range e.all(t, d) {
		if string(m.Body) == dropped {
			t.Fatalf("a Put whose request never reached the server stored message %s", m.ID)
		}
		delete(kept, string(m.Body))
	}
	if len(kept) > 0 {
		t.Fatalf("puts that returned ids are missing: %v", kept)
	}
}

// doneWatch is a context that reports when a callee first asks for its
// Done channel: the call is then inside the driver, waiting.
type doneWatch struct {
	context.Context
	once  sync.Once
	asked chan struct{}
}

func (c *doneWatch) Done() <-chan struct{} {
	c.once.Do(func() { close(c.asked) })
	return c.Context.Done()
}

func testCancelledMidCall(t *testing.T, e *faultEnv) {
	name := e.name("cancelled")
	q := e.open(t, name)
	d := e.direct(t, name)
	e.warm(t, q)
	ms := e.heldMessages(t, q, d, 6)
	receipt := func(m *queue.Message) queue.Receipt { return queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt} }

	release, err := e.h.Proxy.HoldReplies()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	// A: a DeleteBatch whose reply the proxy holds, so it stays in flight.
	aDone := make(chan error, 1)
	go func() {
		_, err := q.DeleteBatch(e.ctx, []queue.Receipt{receipt(ms[0])})
		aDone <- err
	}()
	eventually(t, "the first DeleteBatch's reply reaches the proxy", func() error {
		if e.h.Proxy.Counts().Held == 0 {
			return errors.New("no reply held")
		}
		return nil
	})
	// B: a DeleteBatch that starts while A is in flight and whose caller
	// gives up once it waits inside the driver (or its reply is held).
	bctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	w := &doneWatch{Context: bctx, asked: make(chan struct{})}
	rs := []queue.Receipt{receipt(ms[1])}
	bDone := make(chan error, 1)
	go func() {
		res, err := q.DeleteBatch(w, rs)
		if err == nil {
			err = res[0] // B's outcome for its one receipt
		}
		bDone <- err
	}()
	eventually(t, "the second DeleteBatch waits", func() error {
		select {
		case <-w.asked:
			return nil
		default:
		}
		if e.h.Proxy.Counts().Held >= 2 {
			return nil
		}
		return errors.New("not waiting yet")
	})
	cancel()
	released := false
	var bErr error
	select {
	case bErr = <-bDone:
	case <-time.After(faultHang / 4):
		// A driver that cannot stop a call whose reply is in flight
		// returns when the reply comes.
		t.Log("the cancelled DeleteBatch did not return while its reply was held; releasing")
		release()
		released = true
		bErr = <-bDone
	}
	// What B left at its return (a call that failed may have acted before
	// it returned, never after).
	bStored, known := e.stored(t, d, ms[1].ID)
	// B has returned: its slice is the caller's again.
	rs[0] = receipt(ms[2])
	if !released {
		release()
	}
	if err := <-aDone; err != nil {
		t.Fatalf("the first DeleteBatch: %v", err)
	}
	// A later DeleteBatch sends whatever a driver might still hold queued.
	if _, err := q.DeleteBatch(e.ctx, []queue.Receipt{receipt(ms[3])}); err != nil {
		t.Fatalf("a later DeleteBatch: %v", err)
	}
	for _, m := range ms[4:] {
		if _, err := q.DeleteBatch(e.ctx, []queue.Receipt{receipt(m)}); err != nil {
			t.Fatalf("a later DeleteBatch: %v", err)
		}
	}
	// B's own message: deleted if B said so; if B failed and it was
	// still stored when B returned, still stored now (a request the
	// driver kept queued would have been sent by a later call).
	switch {
	case bErr == nil:
		e.wantStored(t, d, ms[1].ID, false)
	case known && bStored:
		if s, _ := e.stored(t, d, ms[1].ID); !s {
			t.Errorf("a DeleteBatch that returned %v deleted its message afterwards", bErr)
		}
	}
	// The message written into the slice after B returned must still be
	// held with its receipt.
	if _, err := q.UpdateVisibility(e.ctx, ms[2].ID, ms[2].PopReceipt, 0); err != nil {
		t.Fatalf("the message written into a cancelled DeleteBatch's slice after the call returned was acted on: %v", err)
	}
}

func testExpiredBacklog(t *testing.T, e *faultEnv) {
	name := e.name("expired")
	q := e.open(t, name)
	d := e.direct(t, name)
	ttl := e.h.ShortTTL
	if ttl <= 0 {
		ttl = time.Second
	}
	n := e.h.Backlog
	if n <= 0 {
		n = 200
	}
	for i := range n {
		if _, err := d.Put(e.ctx, []byte(fmt.Sprint("expiring-", i)), queue.PutOptions{TTL: ttl}); err != nil {
			t.Fatal(err)
		}
	}
	// Wait out the TTL on the server's clock (the server keeps its own).
	time.Sleep(ttl + e.f.TimeResolution + 500*time.Millisecond)
	live, err := q.Put(e.ctx, []byte("live"), queue.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if e.h.LazyExpiry != "" {
		t.Logf("expired messages leave as Gets meet them: %s", e.h.LazyExpiry)
		e.lazyExpiry(t, q, live, n)
		return
	}
	// No Get yet: Count, Depth and storage drop by themselves (or by
	// being read).
	eventually(t, "Count after the backlog expired", func() error {
		c, err := q.Count(e.ctx)
		if err != nil {
			return err
		}
		if c != 1 {
			return fmt.Errorf("Count = %d, want 1 (the live message)", c)
		}
		return nil
	})
	eventually(t, "Depth after the backlog expired", func() error {
		dp, err := q.Depth(e.ctx)
		if err != nil {
			return err
		}
		if dp.Visible != 1 || dp.InFlight != 0 {
			return fmt.Errorf("Depth = %+v, want 1 visible, none in flight", dp)
		}
		return nil
	})
	if e.h.Stored != nil {
		eventually(t, "storage after the backlog expired", func() error {
			s, err := e.h.Stored(e.ctx, name)
			if err != nil {
				return err
			}
			if s != 1 {
				return fmt.Errorf("the server stores %d messages, want 1 (the live one)", s)
			}
			return nil
		})
	} else {
		t.Log("the harness has no Stored: storage not checked")
	}
	if e.h.GetWork != nil {
		w, err := e.h.GetWork(e.ctx, name)
		if err != nil {
			t.Fatalf("GetWork: %v", err)
		}
		if w > e.f.MaxBatch {
			t.Errorf("a Get steps over %d stored messages after the backlog expired, want at most %d", w, e.f.MaxBatch)
		}
	}
	ms, err := q.Get(e.ctx, e.f.MaxBatch, 30*e.unit())
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].ID != live {
		t.Fatalf("Get after the backlog expired returned %d messages, want the live %s", len(ms), live)
	}
}

// lazyExpiry is ExpiredBacklog's check for a backend whose Gets reclaim
// the expired messages they meet (FaultHarness.LazyExpiry).
func (e *faultEnv) lazyExpiry(t *testing.T, q *queue.Queue, live string, backlog int) {
	t.Helper()
	limit := backlog/e.f.MaxBatch + 2
	var got []*queue.Message
	gets := 0
	for ; gets < limit && len(got) == 0; gets++ {
		ms, err := q.Get(e.ctx, e.f.MaxBatch, 30*e.unit())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.ID != live {
				t.Fatalf("Get returned %q (%s), which had expired", m.Body, m.ID)
			}
		}
		got = ms
	}
	if len(got) != 1 {
		t.Fatalf("%d Gets did not reach the live message put behind %d expired ones", gets, backlog)
	}
	eventually(t, "Count after Gets met the expired backlog", func() error {
		c, err := q.Count(e.ctx)
		if err != nil {
			return err
		}
		if c != 1 {
			return fmt.Errorf("Count = %d, want 1 (the live message)", c)
		}
		return nil
	})
}

func testManySubscribed(t *testing.T, e *faultEnv) {
	if !e.f.NativeNotify {
		t.Skip("the driver's Features say it has no native notify")
	}
	n := 10*runtime.GOMAXPROCS(0) + 2
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var last <-chan struct{}
	var qs []*queue.Queue
	for i := range n {
		q := e.open(t, e.name(fmt.Sprint("sub-", i)))
		sig, err := q.Subscribe(ctx)
		if err != nil {
			t.Fatalf("Subscribe %d: %v", i, err)
		}
		last = sig
		qs = append(qs, q)
	}
	// The Put runs under its own deadline, a hang guard only: it must not
	// wait for a connection the subscriptions hold.
	pctx, pcancel := context.WithTimeout(e.ctx, faultHang/2)
	defer pcancel()
	if _, err := qs[n-1].Put(pctx, []byte("wake"), queue.PutOptions{}); err != nil {
		t.Fatalf("Put with %d queues subscribed: %v", n, err)
	}
	select {
	case <-last:
	case <-time.After(faultHang):
		t.Fatalf("the subscriber of the queue put to heard nothing")
	}
	for i, q := range qs[:3] {
		if _, err := q.Count(pctx); err != nil {
			t.Fatalf("Count of queue %d with %d queues subscribed: %v", i, n, err)
		}
	}
}

func testFaultRestart(t *testing.T, e *faultEnv) {
	if e.h.Restartable != nil {
		h := e.h.Restartable(t)
		e = &faultEnv{h: h, f: normalize(h.Features), ctx: e.ctx, suffix: e.suffix}
	}
	if e.h.Restart == nil {
		t.Skip("the harness cannot restart its server")
	}
	name := e.name("restart")
	q := e.open(t, name)
	d := e.direct(t, name)
	seen := map[string]bool{}
	// Handled before the restart: put, got, deleted.
	for _, m := range e.heldMessages(t, q, d, 3) {
		seen[m.ID] = true
		if err := q.Delete(e.ctx, m.ID, m.PopReceipt); err != nil {
			t.Fatal(err)
		}
	}
	// Got but not deleted: hidden for a few seconds.
	held := map[string]bool{}
	for i := range 2 {
		id, err := d.Put(e.ctx, []byte(fmt.Sprint("held-", i)), queue.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		seen[id] = true
		held[id] = true
	}
	ms, err := q.Get(e.ctx, e.f.MaxBatch, 3*e.unit())
	if err != nil || len(ms) != 2 {
		t.Fatalf("Get: %d messages, %v", len(ms), err)
	}
	e.h.Restart(t)
	for i := range 3 {
		var id string
		err := retry(func() (err error) {
			id, err = q.Put(e.ctx, []byte(fmt.Sprint("after-", i)), queue.PutOptions{})
			return err
		})
		if err != nil {
			t.Fatalf("Put after the restart: %v", err)
		}
		if seen[id] {
			t.Fatalf("a Put after the restart returned id %s, which a message had before it", id)
		}
		seen[id] = true
	}
	back := map[string]bool{}
	eventually(t, "the messages got but not deleted before the restart", func() error {
		ms, err := q.Get(e.ctx, e.f.MaxBatch, 5*time.Minute)
		if err != nil && !queue.IsTransient(err) {
			t.Fatalf("Get after the restart: %v", err)
		}
		for _, m := range ms {
			if !held[m.ID] {
				continue
			}
			back[m.ID] = true
			// A lease the server acknowledged survives it: on a backend
			// that syncs before it answers, the Get before the restart
			// still counts.
			if e.f.Durability == driver.PowerLoss && m.DequeueCount < 2 {
				t.Errorf("message %s came back with dequeue count %d, want 2: the restart undid the Get it had acknowledged", m.ID, m.DequeueCount)
			}
		}
		if len(back) < len(held) {
			return fmt.Errorf("%d of %d came back", len(back), len(held))
		}
		return nil
	})
}

func testClockSkew(t *testing.T, e *faultEnv) {
	if e.h.Skew == nil {
		t.Skip("the harness cannot skew the client's clock")
	}
	const skew = 60 * time.Second
	name := e.name("skew")
	q := e.open(t, name)
	d := e.direct(t, name)
	e.h.Skew(skew)
	// Live on the server's clock for 45 s; expired by the client's.
	ttl := 45 * time.Second
	want := map[string]bool{}
	for i := range 3 {
		id, err := q.Put(e.ctx, []byte(fmt.Sprint("live-", i)), queue.PutOptions{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		want[id] = true
	}
	// Hidden for 30 s on the server's clock; visible by the client's.
	delayed, err := q.Put(e.ctx, []byte("delayed"), queue.PutOptions{InitialVisibilityDelay: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := q.Count(e.ctx); err != nil || c != 4 {
		t.Fatalf("Count with the client's clock %s ahead = %d, %v; want 4", skew, c, err)
	}
	if dp, err := q.Depth(e.ctx); err != nil || dp.Visible != 3 || dp.InFlight != 1 {
		t.Fatalf("Depth with the client's clock %s ahead = %+v, %v; want 3 visible, 1 in flight", skew, dp, err)
	}
	ms, err := q.Get(e.ctx, e.f.MaxBatch, 30*e.unit())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.ID == delayed {
			t.Fatalf("a message delayed for 30 s was got at once by a client whose clock runs %s ahead", skew)
		}
		delete(want, m.ID)
	}
	if len(want) > 0 {
		t.Fatalf("a client whose clock runs %s ahead did not get %d live messages", skew, len(want))
	}
	for _, m := range ms {
		if _, err := q.UpdateVisibility(e.ctx, m.ID, m.PopReceipt, 0); err != nil {
			t.Fatalf("UpdateVisibility of a live message: %v", err)
		}
	}
	if c, err := d.Count(e.ctx); err != nil || c != 4 {
		t.Fatalf("after a skewed client's calls the server holds %d messages (%v), want 4", c, err)
	}
}

func testDropAllMidDrain(t *testing.T, e *faultEnv) {
	name := e.name("drain")
	q := e.open(t, name)
	d := e.direct(t, name)
	n := e.h.DrainMessages
	if n <= 0 {
		n = 1000
	}
	put := map[string]bool{}
	for i := range n {
		id, err := d.Put(e.ctx, []byte(fmt.Sprint("drain-", i)), queue.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		put[id] = true
	}
	if e.f.NativeNotify {
		// The subscription's connection is dropped too.
		sctx, cancel := context.WithCancel(e.ctx)
		defer cancel()
		if _, err := q.Subscribe(sctx); err != nil {
			t.Fatal(err)
		}
	}
	// Every dropEvery-th call (a Get or a DeleteBatch, by any consumer)
	// drops every connection while the others are mid-call, maxDrops times
	// in all: counted in operations, so a slow machine slows the drain but
	// cannot starve it.
	const (
		dropEvery = 5
		maxDrops  = 25
	)
	var ops atomic.Int64
	chaos := func() {
		if k := ops.Add(1); k%dropEvery == 0 && k/dropEvery <= maxDrops {
			e.h.Proxy.DropAll()
		}
	}
	var (
		mu        sync.Mutex
		got       = map[string]bool{}
		transient atomic.Int64
		bad       []error
	)
	record := func(err error) {
		if queue.IsTransient(err) {
			transient.Add(1)
			return
		}
		mu.Lock()
		bad = append(bad, err)
		mu.Unlock()
	}
	vis := 2 * e.unit()
	// A drain that stalls fails before the test's deadline, saying how
	// far it got, instead of hanging.
	ctx, cancel := guard(t, e.ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				mu.Lock()
				stop := len(bad) > 0
				mu.Unlock()
				if stop || ctx.Err() != nil {
					return
				}
				chaos()
				ms, err := q.Get(ctx, e.f.MaxBatch, vis)
				if err != nil {
					record(err)
					continue
				}
				if len(ms) == 0 {
					// Empty, or the rest hidden by Gets whose replies were
					// lost: done when the server holds nothing.
					if c, err := d.Count(ctx); err == nil && c == 0 {
						return
					}
					time.Sleep(50 * time.Millisecond)
					continue
				}
				rs := make([]queue.Receipt, len(ms))
				mu.Lock()
				for i, m := range ms {
					got[m.ID] = true
					rs[i] = queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt}
				}
				mu.Unlock()
				chaos()
				res, err := q.DeleteBatch(ctx, rs)
				if err != nil {
					record(err)
					continue
				}
				for _, r := range res {
					switch {
					case r == nil, errors.Is(r, queue.ErrNotFound), errors.Is(r, queue.ErrReceiptMismatch):
						// deleted; or deleted by a batch whose reply was
						// lost; or got again after its visibility
					default:
						record(r)
					}
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the drain had got %d of %d messages (%d drops, %d transient errors) when the test's deadline neared: %v",
			len(got), n, e.h.Proxy.Counts().Drops, transient.Load(), context.Cause(ctx))
	}
	if len(bad) > 0 {
		t.Fatalf("%d errors were not transient; the first: %v", len(bad), bad[0])
	}
	missing := 0
	for id := range put {
		if !got[id] {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d messages were gone without any Get returning them", missing, n)
	}
	c := e.h.Proxy.Counts()
	t.Logf("%d drops, %d transient errors", c.Drops, transient.Load())
	if c.Drops < maxDrops || transient.Load() == 0 {
		t.Fatalf("%d drops and %d transient errors: the faults did not land", c.Drops, transient.Load())
	}
}
