// Package queuetest is the conformance suite every queue driver runs: one
// call, Run(t, newHarness), checks each rule of the queue contract (package
// queue's doc) against the real backend.
//
// Time-based cases do not sleep for real timeouts when the driver takes an
// injected clock: the harness's Advance moves that clock. Drivers whose
// backend keeps its own time (an emulator over HTTP) leave Advance nil and
// the suite sleeps for real, in whole seconds.
package queuetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// Harness is one isolated instance of the backend under test. Run calls the
// factory once per case, so cases do not share state or clocks.
type Harness struct {
	// NewQueue opens the queue called name on the backend, creating it if
	// needed. It must return an error wrapping queue.ErrInvalidName for a
	// name that breaks the rules, and create nothing then.
	NewQueue func(ctx context.Context, name string) (*queue.Queue, error)

	// Advance moves the backend's clock forward. Nil means the backend keeps
	// real time; the suite then sleeps.
	Advance func(d time.Duration)

	// Reopen, if set, closes everything the harness holds open and opens the
	// backend again (a process restart for a durable driver). Queues opened
	// before are closed by it; the suite reopens them with NewQueue.
	Reopen func(ctx context.Context) error

	// Features are what the driver promises: its limits (MaxBatch, MaxPeek,
	// MaxBody, TimeResolution), whether Count is exact, and which optional
	// operations it has. Every queue the harness opens must report the same
	// limits and capabilities; cases for an operation the driver lacks
	// check that it is refused with queue.ErrUnsupported, and skip the
	// rest, naming what is absent.
	Features driver.Features

	// ConcurrencyMessages overrides the 5,000 messages of the concurrency
	// case (for slow backends in short mode); 0 means 5,000.
	ConcurrencyMessages int
}

// unit is the base duration of time-based cases: long enough for a real
// backend with one-second timestamps, free for a fake clock.
const unit = time.Second

// Run runs the whole suite. newHarness is called once per case.
func Run(t *testing.T, newHarness func(t *testing.T) *Harness) { run(t, newHarness, false) }

// RunParallel runs the whole suite with its cases in parallel: for a
// backend on real time, whose time-based cases sleep, when every harness
// newHarness returns is isolated from the others (a queue prefix of its
// own) and Reopen touches only its own.
func RunParallel(t *testing.T, newHarness func(t *testing.T) *Harness) { run(t, newHarness, true) }

func run(t *testing.T, newHarness func(t *testing.T) *Harness, parallel bool) {
	cases := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"PutGetDelete", testPutGetDelete},
		{"EmptyGet", testEmptyGet},
		{"BatchBounds", testBatchBounds},
		{"BatchGet", testBatchGet},
		{"VisibilityHidesAndTimesOut", testVisibility},
		{"StaleReceiptAfterRedelivery", testStaleReceipt},
		{"ReceiptValidUntilRedelivered", testReceiptValidUntilRedelivered},
		{"UpdateVisibility", testUpdateVisibility},
		{"UpdateVisibilityZeroReleases", testUpdateVisibilityZero},
		{"DequeueCount", testDequeueCount},
		{"TTLExpiry", testTTL},
		{"TTLExpiryWhileHidden", testTTLWhileHidden},
		{"NoExpiry", testNoExpiry},
		{"InitialVisibilityDelay", testInitialDelay},
		{"PeekChangesNothing", testPeek},
		{"PeekAfterPagesInPutOrder", testPeekAfter},
		{"Count", testCount},
		{"Depth", testDepth},
		{"Clear", testClear},
		{"Names", testNames},
		{"BodySize", testBodySize},
		{"BodyRoundTrip", testBodyRoundTrip},
		{"MetadataRoundTrip", testMetadataRoundTrip},
		{"MetadataLimits", testMetadataLimits},
		{"InvalidArguments", testInvalidArguments},
		{"QueuesAreIsolated", testIsolation},
		{"PutBatchSizes", testPutBatchSizes},
		{"PutBatchMixed", testPutBatchMixed},
		{"PutBatchLargeBodies", testPutBatchLargeBodies},
		{"PutBatchWakes", testPutBatchWakes},
		{"PutBatchMetadata", testPutBatchMetadata},
		{"PutBatchLargeMetadata", testPutBatchLargeMetadata},
		{"DeleteBatch", testDeleteBatch},
		{"DeleteBatchLargeAndRepeated", testDeleteBatchLarge},
		{"OrderAfterRelease", testOrderAfterRelease},
		{"CancelledContext", testCancelledContext},
		{"Closed", testClosed},
		{"Restart", testRestart},
		{"Sibling", testSibling},
		{"Subscribe", testSubscribe},
		{"ConcurrentConsumers", testConcurrentConsumers},
		{"ConcurrentConsumersWithTimeouts", testConcurrentWithTimeouts},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if parallel {
				t.Parallel()
			}
			h := newHarness(t)
			if h == nil || h.NewQueue == nil {
				t.Fatal("queuetest: harness without NewQueue")
			}
			c.fn(t, &env{h: h, f: normalize(h.Features), ctx: context.Background()})
		})
	}
}

// normalize fills what a driver may leave zero, as queue.New does.
func normalize(f driver.Features) driver.Features {
	if f.MaxBatch <= 0 || f.MaxBatch > queue.MaxBatchSize {
		f.MaxBatch = queue.MaxBatchSize
	}
	if f.MaxBody <= 0 {
		f.MaxBody = queue.DefaultMaxBodySize
	}
	f.MaxPeek = min(max(f.MaxPeek, 0), queue.MaxPeek)
	return f
}

// env is one case's view of the harness, with helpers that fail the test.
type env struct {
	h   *Harness
	f   driver.Features // the harness's, defaults filled in
	ctx context.Context
}

// batch is the driver's largest Get; peek its largest Peek.
func (e *env) batch() int { return e.f.MaxBatch }
func (e *env) peek() int  { return e.f.MaxPeek }

// need skips the case unless the driver has what it tests, and checks that
// a driver without it refuses the operation as the contract says.
func (e *env) need(t *testing.T, has bool, what string, refused func() error) {
	t.Helper()
	if has {
		return
	}
	if refused != nil {
		if err := refused(); !errors.Is(err, queue.ErrUnsupported) {
			t.Fatalf("%s is absent from Features, but the call returned %v, want ErrUnsupported", what, err)
		}
	}
	t.Skipf("the driver's Features say it has no %s", what)
}

// checkFeatures fails unless q reports the limits and capabilities the
// harness declared.
func (e *env) checkFeatures(t *testing.T, q *queue.Queue) {
	t.Helper()
	got := q.Features()
	want := e.f
	got.Name, want.Name = "", ""
	got.PricePer10k, want.PricePer10k = 0, 0
	if got != want {
		t.Fatalf("queue %q reports Features %+v, the harness declared %+v", q.Name(), got, want)
	}
}

func (e *env) advance(d time.Duration) {
	if e.h.Advance != nil {
		e.h.Advance(d)
		return
	}
	time.Sleep(d)
}

func (e *env) virtual() bool { return e.h.Advance != nil }

func (e *env) maxBody() int { return e.f.MaxBody }

func (e *env) open(t *testing.T, name string) *queue.Queue {
	t.Helper()
	q, err := e.h.NewQueue(e.ctx, name)
	if err != nil {
		t.Fatalf("NewQueue(%q): %v", name, err)
	}
	t.Cleanup(func() { _ = q.Close() })
	e.checkFeatures(t, q)
	return q
}

func (e *env) put(t *testing.T, q *queue.Queue, body string, opts queue.PutOptions) string {
	t.Helper()
	id, err := q.Put(e.ctx, []byte(body), opts)
	if err != nil {
		t.Fatalf("Put(%q): %v", body, err)
	}
	if id == "" {
		t.Fatalf("Put(%q) returned an empty id", body)
	}
	return id
}

func (e *env) get(t *testing.T, q *queue.Queue, n int, vis time.Duration) []*queue.Message {
	t.Helper()
	ms, err := q.Get(e.ctx, n, vis)
	if err != nil {
		t.Fatalf("Get(%d, %s): %v", n, vis, err)
	}
	if len(ms) > n {
		t.Fatalf("Get(%d) returned %d messages", n, len(ms))
	}
	return ms
}

func (e *env) getOne(t *testing.T, q *queue.Queue, vis time.Duration) *queue.Message {
	t.Helper()
	ms := e.get(t, q, 1, vis)
	if len(ms) != 1 {
		t.Fatalf("Get(1) returned %d messages, want 1", len(ms))
	}
	return ms[0]
}

func (e *env) getNone(t *testing.T, q *queue.Queue, why string) {
	t.Helper()
	if ms := e.get(t, q, e.batch(), 30*unit); len(ms) != 0 {
		t.Fatalf("%s: Get returned %d messages (first %q), want none", why, len(ms), ms[0].Body)
	}
}

func (e *env) count(t *testing.T, q *queue.Queue) int {
	t.Helper()
	n, err := q.Count(e.ctx)
	if err != nil {
		t.Fatalf("Count: %v", err)
	}
	return n
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error = %v, want %v", what, err, target)
	}
}

// wantGone checks the outcome of a Delete (or a batch result) with a
// stale receipt or of a message that is gone: target, or where the driver
// has Features.LaxReceipts, nil or either of the two (the outcome, that
// nothing another consumer holds was deleted, each case checks itself).
func (e *env) wantGone(t *testing.T, what string, err, target error) {
	t.Helper()
	if !e.f.LaxReceipts {
		wantErr(t, what, err, target)
		return
	}
	if err != nil && !errors.Is(err, queue.ErrReceiptMismatch) && !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("%s: error = %v, want nil, ErrReceiptMismatch or ErrNotFound (lax receipts)", what, err)
	}
}

// wantRefused checks an UpdateVisibility with a stale receipt or of a
// message that is gone: target, or with Features.LaxReceipts either
// ErrReceiptMismatch or ErrNotFound, never success.
func (e *env) wantRefused(t *testing.T, what string, err, target error) {
	t.Helper()
	if !e.f.LaxReceipts {
		wantErr(t, what, err, target)
		return
	}
	if !errors.Is(err, queue.ErrReceiptMismatch) && !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("%s: error = %v, want ErrReceiptMismatch or ErrNotFound", what, err)
	}
}

// near reports whether a and b differ by no more than the backend's
// timestamp resolution (plus a little for real clocks).
func (e *env) near(a, b time.Time) bool {
	slack := e.f.TimeResolution
	if !e.virtual() {
		slack += 2 * time.Second
	}
	d := a.Sub(b)
	if d < 0 {
		d = -d
	}
	return d <= slack
}

// during reports whether x falls between from and to (this host's clock
// around a call), give or take the backend's timestamp resolution and a
// little for real clocks, as near.
func (e *env) during(x, from, to time.Time) bool {
	if x.Before(from) {
		return e.near(x, from)
	}
	if x.After(to) {
		return e.near(x, to)
	}
	return true
}

func testPutGetDelete(t *testing.T, e *env) {
	q := e.open(t, "put-get-delete")
	before := time.Now()
	id := e.put(t, q, "hello", queue.PutOptions{TTL: time.Hour})
	afterPut := time.Now()
	m := e.getOne(t, q, 30*unit)
	afterGet := time.Now()
	if m.ID != id {
		t.Errorf("ID = %q, want %q", m.ID, id)
	}
	if string(m.Body) != "hello" {
		t.Errorf("Body = %q, want %q", m.Body, "hello")
	}
	if m.DequeueCount != 1 {
		t.Errorf("DequeueCount = %d, want 1", m.DequeueCount)
	}
	if m.PopReceipt == "" {
		t.Error("PopReceipt is empty")
	}
	if m.InsertedAt.IsZero() {
		t.Error("InsertedAt is zero")
	}
	if !e.virtual() && !e.during(m.InsertedAt, before, afterPut) {
		t.Errorf("InsertedAt = %s, want between %s and %s (the Put)", m.InsertedAt, before, afterPut)
	}
	if got := m.ExpiresAt.Sub(m.InsertedAt); !e.near(m.InsertedAt.Add(time.Hour), m.ExpiresAt) {
		t.Errorf("ExpiresAt - InsertedAt = %s, want 1h", got)
	}
	// The visibility timeout runs from the Get: on a real clock a busy
	// machine may get seconds after the put.
	if e.virtual() {
		if got := m.NextVisibleAt.Sub(m.InsertedAt); !e.near(m.InsertedAt.Add(30*unit), m.NextVisibleAt) {
			t.Errorf("NextVisibleAt - InsertedAt = %s, want %s", got, 30*unit)
		}
	} else if !e.during(m.NextVisibleAt, afterPut.Add(30*unit), afterGet.Add(30*unit)) {
		t.Errorf("NextVisibleAt = %s, want 30s after the Get (between %s and %s)", m.NextVisibleAt, afterPut.Add(30*unit), afterGet.Add(30*unit))
	}
	if err := q.Delete(e.ctx, m.ID, m.PopReceipt); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	e.getNone(t, q, "after delete")
	if n := e.count(t, q); n != 0 {
		t.Errorf("Count after delete = %d, want 0", n)
	}
	e.wantGone(t, "Delete twice", q.Delete(e.ctx, m.ID, m.PopReceipt), queue.ErrNotFound)
}

func testEmptyGet(t *testing.T, e *env) {
	q := e.open(t, "empty-get")
	for i := 0; i < 3; i++ {
		ms, err := q.Get(e.ctx, e.batch(), 30*unit)
		if err != nil || len(ms) != 0 {
			t.Fatalf("Get on empty queue = %d messages, %v; want 0, nil", len(ms), err)
		}
	}
	if e.peek() > 0 {
		ms, err := q.Peek(e.ctx, e.peek())
		if err != nil || len(ms) != 0 {
			t.Fatalf("Peek on empty queue = %d messages, %v; want 0, nil", len(ms), err)
		}
	}
}

func testBatchBounds(t *testing.T, e *env) {
	q := e.open(t, "batch-bounds")
	e.put(t, q, "x", queue.PutOptions{})
	for _, n := range []int{0, -1, e.peek() + 1, 1000} {
		_, err := q.Peek(e.ctx, n)
		if e.peek() == 0 {
			wantErr(t, fmt.Sprintf("Peek(%d) without peek", n), err, queue.ErrUnsupported)
		} else {
			wantErr(t, fmt.Sprintf("Peek(%d)", n), err, queue.ErrBatchSize)
		}
	}
	for _, n := range []int{0, -1, e.batch() + 1, 1000} {
		ms, err := q.Get(e.ctx, n, 30*unit)
		wantErr(t, fmt.Sprintf("Get(%d)", n), err, queue.ErrBatchSize)
		if len(ms) != 0 {
			t.Fatalf("Get(%d) returned messages with its error", n)
		}
		if err != nil && !bytes.Contains([]byte(err.Error()), []byte(fmt.Sprint(n))) {
			t.Errorf("Get(%d) error %q does not name the value", n, err)
		}
	}
	// The rejected calls hid nothing.
	m := e.getOne(t, q, 30*unit)
	if m.DequeueCount != 1 {
		t.Errorf("DequeueCount = %d after rejected gets, want 1", m.DequeueCount)
	}
	if ms := e.get(t, q, e.batch(), 30*unit); len(ms) != 0 {
		t.Errorf("Get(%d) on a drained queue returned %d", e.batch(), len(ms))
	}
}

func testBatchGet(t *testing.T, e *env) {
	q := e.open(t, "batch-get")
	total := e.batch() + max(e.batch()/2, 1)
	ids := map[string]bool{}
	for i := 0; i < total; i++ {
		ids[e.put(t, q, fmt.Sprintf("m%02d", i), queue.PutOptions{})] = true
	}
	if len(ids) != total {
		t.Fatalf("Put returned %d distinct ids for %d messages", len(ids), total)
	}
	first := e.get(t, q, e.batch(), 30*unit)
	if len(first) != e.batch() {
		t.Fatalf("first Get(%d) = %d messages, want %d", e.batch(), len(first), e.batch())
	}
	second := e.get(t, q, e.batch(), 30*unit)
	if len(second) != total-e.batch() {
		t.Fatalf("second Get(%d) = %d messages, want %d", e.batch(), len(second), total-e.batch())
	}
	seen := map[string]bool{}
	for _, m := range append(first, second...) {
		if seen[m.ID] {
			t.Fatalf("message %s returned twice while hidden", m.ID)
		}
		if !ids[m.ID] {
			t.Fatalf("unknown id %s", m.ID)
		}
		seen[m.ID] = true
	}
	e.getNone(t, q, "all hidden")
	// Oldest first: the first batch holds the first puts.
	for _, m := range first {
		var i int
		if _, err := fmt.Sscanf(string(m.Body), "m%d", &i); err != nil || i >= e.batch() {
			t.Errorf("first batch holds %q, want one of the first %d puts", m.Body, e.batch())
		}
	}
}

// testVisibility: a got message is hidden until its visibility timeout
// ends, then redelivered with a new receipt and a dequeue count of 2.
//
// On a virtual clock the case is exact: hidden at the get and one unit
// after it, got again one unit after the timeout. On a real clock (the
// backend keeps its own time) a "hidden" check proves something only if
// it was answered before the earliest the backend may show the message
// again (the get's start + vis - TimeResolution, its timestamps being
// rounded): one answered later, on a machine slowed by load, is no
// evidence either way, and the round is run again with a fresh message
// (at most realRounds rounds, bounded by count). The timeout is longer
// there by two resolutions, so that a round has room for its calls, and
// the redelivery is waited for ("visible once the timeout has ended", by
// the backend's clock, not by the instant this host's sleep ends).
func testVisibility(t *testing.T, e *env) {
	q := e.open(t, "visibility")
	vis := 3 * unit
	if !e.virtual() {
		vis += 2 * e.f.TimeResolution
	}
	const realRounds = 3
	var m1 *queue.Message
	for round := 1; ; round++ {
		e.put(t, q, "v", queue.PutOptions{})
		start := time.Now()
		m1 = e.getOne(t, q, vis)
		hiddenBy := start.Add(vis - e.f.TimeResolution)
		// hidden is getNone, except that on a real clock a message got
		// after hiddenBy ends the round (it is deleted) instead of failing.
		hidden := func(why string) bool {
			t.Helper()
			ms := e.get(t, q, e.batch(), 30*unit)
			if len(ms) == 0 {
				return true
			}
			if e.virtual() || time.Now().Before(hiddenBy) {
				t.Fatalf("%s: Get returned %d messages (first %q), want none", why, len(ms), ms[0].Body)
			}
			for _, m := range ms {
				if err := q.Delete(e.ctx, m.ID, m.PopReceipt); err != nil {
					t.Fatalf("deleting the message of a round too slow to judge: %v", err)
				}
			}
			return false
		}
		ok := hidden("hidden right after get")
		if ok {
			e.advance(unit)
			ok = hidden("hidden before the timeout")
		}
		if ok {
			break
		}
		if round == realRounds {
			t.Fatalf("%d rounds each took past the visibility timeout's earliest end (%s after the get) before the checks that it hides the message were answered", round, vis-e.f.TimeResolution)
		}
		t.Logf("round %d: a check was answered after %s, too late to judge; running again", round, vis-e.f.TimeResolution)
	}
	if n := e.count(t, q); n != 1 {
		t.Errorf("Count while hidden = %d, want 1", n)
	}
	e.advance(vis)
	var m2 *queue.Message
	if e.virtual() {
		m2 = e.getOne(t, q, 30*unit)
	} else {
		m2 = e.eventuallyOne(t, q, 30*unit)
	}
	if m2.ID != m1.ID {
		t.Fatalf("redelivered %s, want %s", m2.ID, m1.ID)
	}
	if m2.PopReceipt == m1.PopReceipt {
		t.Error("redelivery reused the pop receipt")
	}
	if m2.DequeueCount != 2 {
		t.Errorf("DequeueCount = %d on redelivery, want 2", m2.DequeueCount)
	}
}

// eventuallyOne gets one message on a real clock, polling until the
// backend shows one (the hang guard, a minute, bounds only a test that
// would otherwise hang: the backend's clock, not this host's, decides
// when a timeout ends).
func (e *env) eventuallyOne(t *testing.T, q *queue.Queue, vis time.Duration) *queue.Message {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ms := e.get(t, q, 1, vis)
		if len(ms) == 1 {
			return ms[0]
		}
		if time.Now().After(deadline) {
			t.Fatal("Get returned no message for a minute after the visibility timeout")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func testStaleReceipt(t *testing.T, e *env) {
	q := e.open(t, "stale-receipt")
	e.put(t, q, "s", queue.PutOptions{})
	m1 := e.getOne(t, q, unit)
	e.advance(2 * unit)
	m2 := e.getOne(t, q, 30*unit)
	e.wantGone(t, "Delete with the receipt of the earlier get", q.Delete(e.ctx, m1.ID, m1.PopReceipt), queue.ErrReceiptMismatch)
	_, err := q.UpdateVisibility(e.ctx, m1.ID, m1.PopReceipt, 10*unit)
	e.wantRefused(t, "UpdateVisibility with a stale receipt", err, queue.ErrReceiptMismatch)
	// The failed calls changed nothing: the newest holder still owns it.
	if err := q.Delete(e.ctx, m2.ID, m2.PopReceipt); err != nil {
		t.Fatalf("Delete with the newest receipt: %v", err)
	}
	e.wantGone(t, "Delete of a deleted message", q.Delete(e.ctx, m2.ID, m2.PopReceipt), queue.ErrNotFound)
	_, err = q.UpdateVisibility(e.ctx, m2.ID, m2.PopReceipt, 0)
	e.wantRefused(t, "UpdateVisibility of a deleted message", err, queue.ErrNotFound)
	// An id that never existed. Drivers choose their own id format, so a
	// malformed id may be either ErrNotFound or ErrInvalidArgument.
	if err := q.Delete(e.ctx, "999999999", "nope"); !errors.Is(err, queue.ErrNotFound) && !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("Delete of an unknown id: %v, want ErrNotFound", err)
	}
}

func testReceiptValidUntilRedelivered(t *testing.T, e *env) {
	// Azure keeps a receipt valid after the visibility timeout until the
	// message is got again: a slow consumer that finishes before anyone
	// else picked the message up may still delete it.
	q := e.open(t, "late-delete")
	e.put(t, q, "late", queue.PutOptions{})
	m := e.getOne(t, q, unit)
	e.advance(2 * unit)
	if err := q.Delete(e.ctx, m.ID, m.PopReceipt); err != nil {
		t.Fatalf("late Delete before redelivery: %v", err)
	}
	e.getNone(t, q, "after late delete")
}

func testUpdateVisibility(t *testing.T, e *env) {
	q := e.open(t, "update-visibility")
	e.put(t, q, "u", queue.PutOptions{})
	m := e.getOne(t, q, 2*unit)
	r2, err := q.UpdateVisibility(e.ctx, m.ID, m.PopReceipt, 10*unit)
	if err != nil {
		t.Fatalf("UpdateVisibility: %v", err)
	}
	if r2 == "" || (r2 == m.PopReceipt && !e.f.LaxReceipts) {
		t.Fatalf("UpdateVisibility returned receipt %q, want a new one (old %q)", r2, m.PopReceipt)
	}
	e.advance(4 * unit)
	e.getNone(t, q, "the extension outlasts the first timeout")
	if r2 != m.PopReceipt { // lax receipts may keep it, and then it is the newest
		e.wantGone(t, "Delete with the receipt before the update", q.Delete(e.ctx, m.ID, m.PopReceipt), queue.ErrReceiptMismatch)
	}
	r3, err := q.UpdateVisibility(e.ctx, m.ID, r2, 10*unit)
	if err != nil {
		t.Fatalf("second UpdateVisibility with the newest receipt: %v", err)
	}
	if r3 == r2 && !e.f.LaxReceipts {
		t.Fatal("second UpdateVisibility reused the receipt")
	}
	if err := q.Delete(e.ctx, m.ID, r3); err != nil {
		t.Fatalf("Delete with the newest receipt: %v", err)
	}
	for _, d := range []time.Duration{-time.Second, queue.MaxVisibilityTimeout + time.Second} {
		e.put(t, q, "w", queue.PutOptions{})
		m := e.getOne(t, q, 30*unit)
		_, err := q.UpdateVisibility(e.ctx, m.ID, m.PopReceipt, d)
		wantErr(t, fmt.Sprintf("UpdateVisibility(%s)", d), err, queue.ErrInvalidArgument)
		if err := q.Delete(e.ctx, m.ID, m.PopReceipt); err != nil {
			t.Fatalf("rejected UpdateVisibility(%s) changed the receipt: %v", d, err)
		}
	}
}

func testUpdateVisibilityZero(t *testing.T, e *env) {
	q := e.open(t, "release-now")
	e.put(t, q, "r", queue.PutOptions{})
	m := e.getOne(t, q, 60*unit)
	r2, err := q.UpdateVisibility(e.ctx, m.ID, m.PopReceipt, 0)
	if err != nil {
		t.Fatalf("UpdateVisibility(0): %v", err)
	}
	if r2 == m.PopReceipt && !e.f.LaxReceipts {
		t.Fatal("UpdateVisibility(0) kept the receipt")
	}
	m2 := e.getOne(t, q, 30*unit) // at once: no advance
	if m2.ID != m.ID || m2.DequeueCount != 2 {
		t.Fatalf("after release got %s with dequeue count %d, want %s with 2", m2.ID, m2.DequeueCount, m.ID)
	}
	e.wantGone(t, "Delete with the release receipt after redelivery", q.Delete(e.ctx, m.ID, r2), queue.ErrReceiptMismatch)
}

func testDequeueCount(t *testing.T, e *env) {
	q := e.open(t, "dequeue-count")
	e.put(t, q, "d", queue.PutOptions{})
	for want := 1; want <= 4; want++ {
		if ps, err := q.Peek(e.ctx, 1); e.peek() > 0 && (err != nil || len(ps) != 1 || ps[0].DequeueCount != want-1) {
			t.Fatalf("Peek before get %d: %v, %v; want dequeue count %d", want, ps, err, want-1)
		}
		m := e.getOne(t, q, unit)
		if m.DequeueCount != want {
			t.Fatalf("get %d: DequeueCount = %d", want, m.DequeueCount)
		}
		e.advance(2 * unit)
	}
}

func testTTL(t *testing.T, e *env) {
	q := e.open(t, "ttl")
	putAt := time.Now()
	id := e.put(t, q, "short", queue.PutOptions{TTL: 3 * unit})
	e.put(t, q, "long", queue.PutOptions{TTL: time.Hour})
	e.advance(unit)
	ps, err := q.Peek(e.ctx, max(e.peek(), 1))
	switch {
	case e.peek() == 0:
	case !e.virtual() && time.Since(putAt) >= 2*unit:
		// On real time, a machine this busy peeks too late to see the short
		// message before it expires; what follows still holds.
		t.Logf("the peek came %s after the put: too late to check it before expiry", time.Since(putAt).Round(time.Millisecond))
	case err != nil || len(ps) != 2:
		t.Fatalf("Peek before expiry = %d messages, %v; want 2", len(ps), err)
	}
	e.advance(3 * unit)
	ps, err = q.Peek(e.ctx, max(e.peek(), 1))
	if e.peek() > 0 && (err != nil || len(ps) != 1 || string(ps[0].Body) != "long") {
		t.Fatalf("Peek after expiry = %d messages, %v; want only %q", len(ps), err, "long")
	}
	ms := e.get(t, q, e.batch(), 30*unit)
	if len(ms) != 1 || string(ms[0].Body) != "long" {
		t.Fatalf("Get after expiry = %d messages; want only %q", len(ms), "long")
	}
	if e.f.ExactCount {
		if n := e.count(t, q); n != 1 {
			t.Errorf("Count after expiry = %d, want 1", n)
		}
	}
	_, err = q.UpdateVisibility(e.ctx, id, "x", 0)
	if !errors.Is(err, queue.ErrNotFound) && !errors.Is(err, queue.ErrReceiptMismatch) {
		t.Errorf("UpdateVisibility of an expired message: %v, want ErrNotFound", err)
	}
}

func testTTLWhileHidden(t *testing.T, e *env) {
	// On a real clock a machine busy enough to take the whole TTL between
	// the first put and the Get cannot hold the messages before they
	// expire: the case then starts again on a fresh queue with twice the
	// TTL (three tries).
	ttl := 3 * unit
	for try := 1; ; try++ {
		name := "ttl-hidden"
		if try > 1 {
			name = fmt.Sprintf("ttl-hidden-%d", try)
		}
		q := e.open(t, name)
		vis := ttl + 7*unit // outlasts the TTL
		start := time.Now()
		e.put(t, q, "x", queue.PutOptions{TTL: ttl})
		e.put(t, q, "y", queue.PutOptions{TTL: ttl})
		ms := e.get(t, q, 2, vis)
		if took := time.Since(start); len(ms) != 2 && !e.virtual() && took >= ttl && try < 3 {
			t.Logf("try %d: the Get came %s after the first put, past the %s TTL: trying again with %s", try, took.Round(time.Millisecond), ttl, 2*ttl)
			ttl *= 2
			continue
		}
		if len(ms) != 2 {
			t.Fatalf("Get(2) = %d", len(ms))
		}
		e.advance(ttl + unit)
		// The holder's receipt dies with the message, before any Get notices.
		wantErr(t, "Delete of a message expired while held", q.Delete(e.ctx, ms[0].ID, ms[0].PopReceipt), queue.ErrNotFound)
		_, err := q.UpdateVisibility(e.ctx, ms[1].ID, ms[1].PopReceipt, time.Minute)
		wantErr(t, "UpdateVisibility of a message expired while held", err, queue.ErrNotFound)
		e.advance(vis - ttl + 3*unit) // past the visibility timeout
		e.getNone(t, q, "expired while hidden")
		return
	}
}

func testNoExpiry(t *testing.T, e *env) {
	q := e.open(t, "no-expiry")
	e.put(t, q, "forever", queue.PutOptions{TTL: queue.NoExpiry})
	if e.virtual() {
		e.advance(30 * 24 * time.Hour)
	}
	m := e.getOne(t, q, 30*unit)
	if !m.ExpiresAt.IsZero() && m.ExpiresAt.Before(m.InsertedAt.AddDate(100, 0, 0)) {
		t.Errorf("ExpiresAt = %s for a message put with NoExpiry", m.ExpiresAt)
	}
}

func testInitialDelay(t *testing.T, e *env) {
	// On a real clock a machine busy enough to take the whole delay between
	// the put and the last check proves nothing either way: the case then
	// starts again on a fresh queue with twice the delay (three tries).
	delay := 3 * unit
	for try := 1; ; try++ {
		name := "initial-delay"
		if try > 1 {
			name = fmt.Sprintf("initial-delay-%d", try)
		}
		q := e.open(t, name)
		start := time.Now()
		e.put(t, q, "later", queue.PutOptions{InitialVisibilityDelay: delay})
		ms := e.get(t, q, e.batch(), 30*unit)
		var ps []*queue.Message
		var perr error
		if e.peek() > 0 {
			ps, perr = q.Peek(e.ctx, 1)
		}
		n := e.count(t, q)
		if took := time.Since(start); !e.virtual() && took >= delay && try < 3 {
			t.Logf("try %d: the checks took %s, the whole %s delay: trying again with %s", try, took.Round(time.Millisecond), delay, 2*delay)
			delay *= 2
			continue
		}
		if len(ms) != 0 {
			t.Fatalf("delayed message: Get returned %d messages (first %q), want none", len(ms), ms[0].Body)
		}
		if e.peek() > 0 && (perr != nil || len(ps) != 0) {
			t.Fatalf("Peek of a delayed message = %d, %v; want none", len(ps), perr)
		}
		if n != 1 {
			t.Errorf("Count with one delayed message = %d, want 1", n)
		}
		e.advance(delay + unit)
		m := e.getOne(t, q, 30*unit)
		if string(m.Body) != "later" || m.DequeueCount != 1 {
			t.Fatalf("got %q with dequeue count %d", m.Body, m.DequeueCount)
		}
		return
	}
}

func testPeek(t *testing.T, e *env) {
	q := e.open(t, "peek")
	e.need(t, e.peek() > 0, "peek", func() error {
		_, err := q.Peek(e.ctx, 1)
		return err
	})
	for _, b := range []string{"a", "b", "c"} {
		e.put(t, q, b, queue.PutOptions{})
	}
	for i := 0; i < 2; i++ {
		ps, err := q.Peek(e.ctx, e.peek())
		if err != nil || len(ps) != 3 {
			t.Fatalf("Peek = %d, %v; want 3", len(ps), err)
		}
		for j, p := range ps {
			if want := string(rune('a' + j)); string(p.Body) != want {
				t.Errorf("Peek[%d] = %q, want %q (oldest first)", j, p.Body, want)
			}
			if p.PopReceipt != "" || p.DequeueCount != 0 {
				t.Errorf("Peek[%d]: receipt %q, dequeue count %d; want none and 0", j, p.PopReceipt, p.DequeueCount)
			}
		}
	}
	if ps, err := q.Peek(e.ctx, 2); err != nil || len(ps) != 2 {
		t.Fatalf("Peek(2) = %d, %v", len(ps), err)
	}
	m := e.getOne(t, q, 30*unit)
	if string(m.Body) != "a" || m.DequeueCount != 1 {
		t.Fatalf("Get after peeks = %q with dequeue count %d, want %q with 1", m.Body, m.DequeueCount, "a")
	}
	ps, err := q.Peek(e.ctx, e.peek())
	if err != nil || len(ps) != 2 {
		t.Fatalf("Peek with one hidden = %d, %v; want 2", len(ps), err)
	}
	if err := q.Delete(e.ctx, m.ID, m.PopReceipt); err != nil {
		t.Fatalf("Delete after peek: %v (peek must not change receipts)", err)
	}
}

// testPeekAfter checks Queue.PeekAfter where the driver pages its peeks
// (driver.PeekPager): every visible message once, in the order put, page
// after page beyond one peek, changing nothing; a hidden message is
// skipped; an after the driver never gave is ErrInvalidArgument.
func testPeekAfter(t *testing.T, e *env) {
	q := e.open(t, "peek-after")
	if !q.PeekPages() {
		if _, err := q.PeekAfter(e.ctx, "", 1); !errors.Is(err, queue.ErrUnsupported) {
			t.Fatalf("PeekAfter without the capability = %v, want ErrUnsupported", err)
		}
		t.Skip("the driver does not page its peeks")
	}
	n := e.peek() + 5
	for i := range n {
		e.put(t, q, fmt.Sprint(i), queue.PutOptions{})
	}
	held := e.getOne(t, q, 30*unit) // "0": hidden, not peeked
	var got []string
	for after := ""; ; {
		ps, err := q.PeekAfter(e.ctx, after, 3)
		if err != nil {
			t.Fatalf("PeekAfter(%q, 3): %v", after, err)
		}
		if len(ps) == 0 {
			break
		}
		for _, p := range ps {
			got = append(got, string(p.Body))
			if p.DequeueCount != 0 || p.PopReceipt != "" {
				t.Errorf("PeekAfter: %q with dequeue count %d, receipt %q; want 0 and none", p.Body, p.DequeueCount, p.PopReceipt)
			}
		}
		after = ps[len(ps)-1].ID
		if len(got) > n {
			t.Fatalf("PeekAfter does not end: %v", got)
		}
	}
	if len(got) != n-1 {
		t.Fatalf("PeekAfter pages showed %v, want the %d visible ones", got, n-1)
	}
	for i, b := range got {
		if b != fmt.Sprint(i+1) {
			t.Fatalf("PeekAfter pages showed %v, want 1..%d in the order put", got, n-1)
		}
	}
	if err := q.Delete(e.ctx, held.ID, held.PopReceipt); err != nil {
		t.Fatalf("Delete after PeekAfter: %v", err)
	}
	if _, err := q.PeekAfter(e.ctx, "not an id!", 1); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("PeekAfter with a foreign cursor = %v, want ErrInvalidArgument", err)
	}
}

func testCount(t *testing.T, e *env) {
	q := e.open(t, "count")
	for i := 0; i < 5; i++ {
		e.put(t, q, "c", queue.PutOptions{})
	}
	if n := e.count(t, q); n != 5 {
		t.Fatalf("Count = %d, want 5", n)
	}
	ms := e.get(t, q, 2, 30*unit)
	if n := e.count(t, q); n != 5 {
		t.Fatalf("Count with 2 hidden = %d, want 5 (visible and invisible)", n)
	}
	for _, m := range ms {
		if err := q.Delete(e.ctx, m.ID, m.PopReceipt); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.count(t, q); n != 3 {
		t.Fatalf("Count after 2 deletes = %d, want 3", n)
	}
}

// testDepth checks Queue.Depth: Count's total always, and where the
// driver reads depth itself (driver.DepthReader) the visible and hidden
// messages apart and the oldest one's insertion time. Expired messages
// are not counted.
func testDepth(t *testing.T, e *env) {
	q := e.open(t, "depth")
	depth := func() queue.Depth {
		t.Helper()
		d, err := q.Depth(e.ctx)
		if err != nil {
			t.Fatalf("Depth: %v", err)
		}
		return d
	}
	if d := depth(); d.Messages != 0 || d.Visible != 0 || d.InFlight != 0 || !d.Oldest.IsZero() {
		t.Fatalf("Depth of an empty queue = %+v, want zero", d)
	}
	e.put(t, q, "expires", queue.PutOptions{TTL: unit})
	e.advance(2 * unit)
	for i := 0; i < 5; i++ {
		e.put(t, q, "d", queue.PutOptions{})
	}
	// A distributed backend may return fewer than asked: get until two
	// are held.
	var ms []*queue.Message
	for try := 0; len(ms) < 2 && try < 20; try++ {
		ms = append(ms, e.get(t, q, 2-len(ms), 30*unit)...)
	}
	if len(ms) != 2 {
		t.Fatalf("Gets returned %d messages, want 2", len(ms))
	}
	d := depth()
	if e.f.ExactCount && d.Messages != 5 {
		t.Fatalf("Depth with 2 of 5 hidden = %+v, want 5 messages", d)
	}
	if !d.Split {
		t.Logf("the driver reads no split depth: Messages only (%d)", d.Messages)
		return
	}
	// An approximate depth may count the expired message as visible until
	// the backend sweeps it.
	if d.InFlight != 2 || d.Messages != d.Visible+d.InFlight || d.Visible < 3 || (e.f.ExactCount && d.Visible != 3) {
		t.Fatalf("Depth with 2 of 5 hidden = %+v, want 3 visible, 2 in flight", d)
	}
	// The five were put at once (in virtual time, at one instant).
	first := ms[0].InsertedAt
	if ms[1].InsertedAt.Before(first) {
		first = ms[1].InsertedAt
	}
	if !d.Oldest.IsZero() && !e.near(d.Oldest, first) {
		t.Fatalf("Depth.Oldest = %v, want the first message's insertion %v", d.Oldest, first)
	}
	for _, m := range ms {
		if err := q.Delete(e.ctx, m.ID, m.PopReceipt); err != nil {
			t.Fatal(err)
		}
	}
	if d := depth(); d.Visible < 3 || (e.f.ExactCount && d.Visible != 3) || d.InFlight != 0 {
		t.Fatalf("Depth after 2 deletes = %+v, want 3 visible, none in flight", d)
	}
}

func testClear(t *testing.T, e *env) {
	q := e.open(t, "clear")
	other := e.open(t, "clear-other")
	for i := 0; i < 10; i++ {
		e.put(t, q, "x", queue.PutOptions{})
	}
	e.put(t, other, "keep", queue.PutOptions{})
	m := e.getOne(t, q, 30*unit)
	if err := q.Clear(e.ctx); err != nil {
		t.Fatalf("Clear: %v", err)
	}
	if n := e.count(t, q); n != 0 {
		t.Fatalf("Count after Clear = %d", n)
	}
	e.getNone(t, q, "after Clear")
	e.wantGone(t, "Delete after Clear", q.Delete(e.ctx, m.ID, m.PopReceipt), queue.ErrNotFound)
	if n := e.count(t, other); n != 1 {
		t.Fatalf("Clear touched another queue: its count is %d", n)
	}
	id := e.put(t, q, "after", queue.PutOptions{})
	if id == m.ID {
		t.Fatalf("id %s reused after Clear", id)
	}
}

func testNames(t *testing.T, e *env) {
	long := string(bytes.Repeat([]byte("a"), queue.MaxNameLength))
	for _, name := range []string{"abc", "a-b-c1", "0ab", long} {
		q, err := e.h.NewQueue(e.ctx, name)
		if err != nil {
			t.Errorf("valid name %q rejected: %v", name, err)
			continue
		}
		_ = q.Close()
	}
	for _, name := range []string{"", "ab", "-abc", "abc-", "a--b", "Abc", "a_b", "a.b", "a b", long + "a", "émoji"} {
		q, err := e.h.NewQueue(e.ctx, name)
		if !errors.Is(err, queue.ErrInvalidName) {
			if q != nil {
				_ = q.Close()
			}
			t.Errorf("name %q: error = %v, want ErrInvalidName", name, err)
			continue
		}
		if name != "" && !bytes.Contains([]byte(err.Error()), []byte(fmt.Sprintf("%q", name))) {
			t.Errorf("name %q: error %q does not name it", name, err)
		}
	}
}

func testBodySize(t *testing.T, e *env) {
	q := e.open(t, "body-size")
	max := e.maxBody()
	full := bytes.Repeat([]byte{0xAB}, max)
	if _, err := q.Put(e.ctx, full, queue.PutOptions{}); err != nil {
		t.Fatalf("Put of %d bytes (the limit): %v", max, err)
	}
	_, err := q.Put(e.ctx, append(full, 1), queue.PutOptions{})
	wantErr(t, fmt.Sprintf("Put of %d bytes", max+1), err, queue.ErrTooLarge)
	if err != nil && !bytes.Contains([]byte(err.Error()), []byte(fmt.Sprint(max+1))) {
		t.Errorf("ErrTooLarge %q does not name the size", err)
	}
	if n := e.count(t, q); n != 1 {
		t.Fatalf("Count = %d after a rejected put, want 1", n)
	}
	m := e.getOne(t, q, 30*unit)
	if !bytes.Equal(m.Body, full) {
		t.Fatal("body at the limit did not round-trip")
	}
}

// roundTripBodies are bytes a driver must carry unchanged: every byte
// value, empty, text of every plane (emoji are four bytes of UTF-8 and a
// surrogate pair in UTF-16), characters XML and SQS refuse, byte
// sequences that are not UTF-8 (an encoded surrogate, an overlong form, a
// cut-off sequence), and seeded random bytes.
func roundTripBodies() [][]byte {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	random := make([]byte, 300)
	for i, x := 0, uint32(2463534242); i < len(random); i++ {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		random[i] = byte(x)
	}
	return [][]byte{
		all, {}, []byte("日本語のメッセージ"), []byte("line1\nline2\r\n\x00end"), []byte(`{"json":true}`),
		[]byte(`{"note":"pizza 🍕 for Zoë"} 𝄞 ` + "\U0010FFFF"),
		[]byte("\uFFFE\uFFFF\x01\x1f\u0085 \uFDD0"),
		{0xED, 0xA0, 0x80, 'x', 0xC0, 0xAF, 0xF0, 0x9F, 0x8D},
		random,
	}
}

func testBodyRoundTrip(t *testing.T, e *env) {
	q := e.open(t, "round-trip")
	bodies := roundTripBodies()
	byID := map[string][]byte{}
	for _, b := range bodies {
		id, err := q.Put(e.ctx, b, queue.PutOptions{})
		if err != nil {
			t.Fatalf("Put(%q): %v", b, err)
		}
		byID[id] = b
	}
	getAll := func() []*queue.Message {
		var ms []*queue.Message
		for len(ms) < len(bodies) {
			got := e.get(t, q, min(e.batch(), len(bodies)-len(ms)), 30*unit)
			if len(got) == 0 {
				t.Fatalf("Get after %d of %d messages returned none", len(ms), len(bodies))
			}
			ms = append(ms, got...)
		}
		return ms
	}
	ms := getAll()
	for _, m := range ms {
		if want, ok := byID[m.ID]; !ok {
			t.Errorf("got unknown id %s", m.ID)
		} else if !bytes.Equal(m.Body, want) {
			t.Errorf("body = %q, want %q", m.Body, want)
		}
	}
	// The caller may modify what it got without touching the queue.
	for _, m := range ms {
		for i := range m.Body {
			m.Body[i] = 0
		}
		if _, err := q.UpdateVisibility(e.ctx, m.ID, m.PopReceipt, 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range getAll() {
		if !bytes.Equal(m.Body, byID[m.ID]) {
			t.Errorf("after the caller overwrote its copy, body = %q, want %q", m.Body, byID[m.ID])
		}
	}
}

func testInvalidArguments(t *testing.T, e *env) {
	q := e.open(t, "invalid-args")
	bad := []queue.PutOptions{
		{TTL: -5 * time.Second},
		{InitialVisibilityDelay: -time.Second},
		{InitialVisibilityDelay: queue.MaxVisibilityTimeout + time.Second},
		{TTL: time.Minute, InitialVisibilityDelay: time.Minute},
	}
	for _, o := range bad {
		_, err := q.Put(e.ctx, []byte("x"), o)
		wantErr(t, fmt.Sprintf("Put with %+v", o), err, queue.ErrInvalidArgument)
	}
	for _, v := range []time.Duration{0, -time.Second, queue.MaxVisibilityTimeout + time.Second} {
		_, err := q.Get(e.ctx, 1, v)
		wantErr(t, fmt.Sprintf("Get with visibility %s", v), err, queue.ErrInvalidArgument)
	}
	if n := e.count(t, q); n != 0 {
		t.Fatalf("rejected puts wrote %d messages", n)
	}
}

func testIsolation(t *testing.T, e *env) {
	a := e.open(t, "iso-a")
	b := e.open(t, "iso-b")
	e.put(t, a, "for-a", queue.PutOptions{})
	e.getNone(t, b, "queue b")
	if n := e.count(t, b); n != 0 {
		t.Fatalf("Count(b) = %d", n)
	}
	m := e.getOne(t, a, 30*unit)
	wantErr(t, "Delete through another queue", b.Delete(e.ctx, m.ID, m.PopReceipt), queue.ErrNotFound)
	// The same name opened twice is the same queue.
	a2 := e.open(t, "iso-a")
	if n := e.count(t, a2); n != 1 {
		t.Fatalf("second handle on iso-a counts %d, want 1", n)
	}
	if err := a2.Delete(e.ctx, m.ID, m.PopReceipt); err != nil {
		t.Fatalf("Delete through a second handle: %v", err)
	}
}

func testDeleteBatch(t *testing.T, e *env) {
	q := e.open(t, "delete-batch")
	for _, b := range []string{"a", "b", "c"} {
		e.put(t, q, b, queue.PutOptions{})
	}
	first := e.get(t, q, 3, unit)
	if len(first) != 3 {
		t.Fatalf("Get(3) = %d", len(first))
	}
	e.advance(2 * unit)
	second := e.get(t, q, 3, 30*unit)
	if len(second) != 3 {
		t.Fatalf("redelivery Get(3) = %d", len(second))
	}
	byBody := map[string]*queue.Message{}
	for _, m := range second {
		byBody[string(m.Body)] = m
	}
	stale := map[string]*queue.Message{}
	for _, m := range first {
		stale[string(m.Body)] = m
	}
	if err := q.Delete(e.ctx, byBody["c"].ID, byBody["c"].PopReceipt); err != nil {
		t.Fatal(err)
	}
	rs := []queue.Receipt{
		{ID: byBody["a"].ID, PopReceipt: byBody["a"].PopReceipt}, // newest: deleted
		{ID: stale["b"].ID, PopReceipt: stale["b"].PopReceipt},   // stale
		{ID: byBody["c"].ID, PopReceipt: byBody["c"].PopReceipt}, // already gone
	}
	res, err := q.DeleteBatch(e.ctx, rs)
	if err != nil {
		t.Fatalf("DeleteBatch: %v", err)
	}
	if len(res) != len(rs) {
		t.Fatalf("DeleteBatch returned %d results for %d receipts", len(res), len(rs))
	}
	if res[0] != nil {
		t.Errorf("batch result for the newest receipt: %v, want nil", res[0])
	}
	e.wantGone(t, "batch result for a stale receipt", res[1], queue.ErrReceiptMismatch)
	e.wantGone(t, "batch result for a deleted message", res[2], queue.ErrNotFound)
	if n := e.count(t, q); n != 1 {
		t.Fatalf("Count after batch delete = %d, want 1 (b, whose stale receipt failed)", n)
	}
	if err := q.Delete(e.ctx, byBody["b"].ID, byBody["b"].PopReceipt); err != nil {
		t.Fatalf("the failed batch entry changed b's receipt: %v", err)
	}
	if res, err := q.DeleteBatch(e.ctx, nil); err != nil || len(res) != 0 {
		t.Fatalf("DeleteBatch(nil) = %v, %v", res, err)
	}
}

func testDeleteBatchLarge(t *testing.T, e *env) {
	q := e.open(t, "delete-batch-large")
	for i := 0; i < 40; i++ {
		e.put(t, q, fmt.Sprint(i), queue.PutOptions{})
	}
	var rs []queue.Receipt
	for len(rs) < 40 {
		ms := e.get(t, q, e.batch(), 30*unit)
		if len(ms) == 0 {
			t.Fatalf("got %d of 40", len(rs))
		}
		for _, m := range ms {
			rs = append(rs, queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
		}
	}
	// More than one get's worth, with one message named twice: results
	// match one Delete per receipt, in order.
	rs = append(rs, rs[3])
	res, err := q.DeleteBatch(e.ctx, rs)
	if err != nil {
		t.Fatalf("DeleteBatch of %d: %v", len(rs), err)
	}
	if len(res) != len(rs) {
		t.Fatalf("%d results for %d receipts", len(res), len(rs))
	}
	for i := 0; i < 40; i++ {
		if res[i] != nil {
			t.Fatalf("result %d = %v, want nil", i, res[i])
		}
	}
	e.wantGone(t, "the repeated receipt", res[40], queue.ErrNotFound)
	if n := e.count(t, q); n != 0 {
		t.Fatalf("Count = %d after deleting all", n)
	}
}

func testOrderAfterRelease(t *testing.T, e *env) {
	q := e.open(t, "order-release")
	for _, b := range []string{"a", "b", "c"} {
		e.put(t, q, b, queue.PutOptions{})
	}
	e.advance(unit)
	ms := e.get(t, q, 1, 30*unit) // a
	if len(ms) != 1 || string(ms[0].Body) != "a" {
		t.Fatalf("first get = %v", ms)
	}
	e.advance(unit)
	if _, err := q.UpdateVisibility(e.ctx, ms[0].ID, ms[0].PopReceipt, 0); err != nil {
		t.Fatal(err)
	}
	// a is visible again, but since after b and c: it comes last.
	got := ""
	for _, m := range e.get(t, q, 3, 30*unit) {
		got += string(m.Body)
	}
	if got != "bca" {
		t.Fatalf("order after a release = %q, want %q (oldest visible first)", got, "bca")
	}
}

func testCancelledContext(t *testing.T, e *env) {
	q := e.open(t, "cancelled")
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	if _, err := q.Put(ctx, []byte("x"), queue.PutOptions{}); err == nil {
		t.Fatal("Put with a cancelled context succeeded")
	} else if queue.IsTransient(err) {
		t.Errorf("a cancelled context is reported transient: %v", err)
	}
	if _, err := q.Get(ctx, 1, 30*unit); err == nil {
		t.Fatal("Get with a cancelled context succeeded")
	}
	if n := e.count(t, q); n != 0 {
		t.Fatalf("Put with a cancelled context wrote %d messages", n)
	}
}

func testClosed(t *testing.T, e *env) {
	q, err := e.h.NewQueue(e.ctx, "closed")
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_, err = q.Put(e.ctx, []byte("x"), queue.PutOptions{})
	wantErr(t, "Put after Close", err, queue.ErrClosed)
	_, err = q.Get(e.ctx, 1, 30*unit)
	wantErr(t, "Get after Close", err, queue.ErrClosed)
	_ = q.Close() // a second Close is harmless
}

func testRestart(t *testing.T, e *env) {
	if e.h.Reopen == nil {
		t.Skip("backend is not durable across a reopen")
	}
	q, err := e.h.NewQueue(e.ctx, "restart")
	if err != nil {
		t.Fatal(err)
	}
	keep := e.put(t, q, "kept", queue.PutOptions{})
	e.put(t, q, "held", queue.PutOptions{})
	ms := e.get(t, q, 2, 10*unit)
	if len(ms) != 2 {
		t.Fatalf("Get(2) = %d", len(ms))
	}
	for _, m := range ms {
		if string(m.Body) == "kept" {
			if _, err := q.UpdateVisibility(e.ctx, m.ID, m.PopReceipt, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := e.h.Reopen(e.ctx); err != nil {
		t.Fatalf("Reopen: %v", err)
	}
	q = e.open(t, "restart")
	if n := e.count(t, q); n != 2 {
		t.Fatalf("Count after reopen = %d, want 2", n)
	}
	m := e.getOne(t, q, 30*unit)
	if m.ID != keep || m.DequeueCount != 2 {
		t.Fatalf("after reopen got %s (dequeue count %d), want the released %s with 2", m.ID, m.DequeueCount, keep)
	}
	e.getNone(t, q, "the held message stays hidden across the reopen")
	e.advance(11 * unit)
	m2 := e.getOne(t, q, 30*unit)
	if string(m2.Body) != "held" || m2.DequeueCount != 2 {
		t.Fatalf("after the timeout got %q (dequeue count %d), want %q with 2", m2.Body, m2.DequeueCount, "held")
	}
}

func testSibling(t *testing.T, e *env) {
	q := e.open(t, "sibling-main")
	e.need(t, e.f.Siblings, "siblings", func() error {
		_, err := q.Sibling(e.ctx, "sibling-main-poison")
		return err
	})
	s, err := q.Sibling(e.ctx, "sibling-main-poison")
	if err != nil {
		t.Fatalf("Sibling: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if s.Name() != "sibling-main-poison" {
		t.Fatalf("sibling is named %q", s.Name())
	}
	e.put(t, s, "to-poison", queue.PutOptions{})
	e.getNone(t, q, "the main queue, after a put to its sibling")
	same := e.open(t, "sibling-main-poison")
	if n := e.count(t, same); n != 1 {
		t.Fatalf("the sibling is not the queue of that name: count %d", n)
	}
	if _, err := q.Sibling(e.ctx, "Bad_Name"); !errors.Is(err, queue.ErrInvalidName) {
		t.Fatalf("Sibling with a bad name: %v", err)
	}
	// Closing the sibling leaves the main queue working, and closing the
	// main queue leaves another sibling working (they may share a file,
	// an account or a connection pool).
	_ = s.Close()
	e.put(t, q, "still", queue.PutOptions{})
	s2, err := q.Sibling(e.ctx, "sibling-main-poison")
	if err != nil {
		t.Fatalf("Sibling again: %v", err)
	}
	t.Cleanup(func() { _ = s2.Close() })
	_ = q.Close()
	e.put(t, s2, "after-parent-closed", queue.PutOptions{})
	if n := e.count(t, s2); n != 2 {
		t.Fatalf("the sibling counts %d after its parent closed, want 2", n)
	}
}

func testSubscribe(t *testing.T, e *env) {
	q := e.open(t, "subscribe")
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	e.need(t, e.f.NativeNotify, "native notify", func() error {
		_, err := q.Subscribe(ctx)
		return err
	})
	sig, err := q.Subscribe(ctx)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	// A put through another handle, as from another producer, wakes the
	// subscriber. The wait is only a guard against a hang.
	other := e.open(t, "subscribe")
	for i := 0; i < 2; i++ {
		e.put(t, other, fmt.Sprint("wake-", i), queue.PutOptions{})
		select {
		case <-sig:
		case <-time.After(30 * time.Second):
			t.Fatalf("put %d: no signal within 30 s", i)
		}
	}
	// Two puts while nobody reads merge into one pending signal, never block
	// the producer.
	e.put(t, other, "a", queue.PutOptions{})
	e.put(t, other, "b", queue.PutOptions{})
	select {
	case <-sig:
	case <-time.After(30 * time.Second):
		t.Fatal("no signal for two puts")
	}
}
