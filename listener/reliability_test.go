package listener_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/poison"

	"github.com/adaptq/adaptq/internal/testutil"
)

// poisonFixture is a fixture whose listener poisons into a sibling queue.
func poisonFixture(t *testing.T, h handler.Func, o listener.Options, wrapPoison func(driver.Queue) driver.Queue) (*fixture, *queue.Queue) {
	t.Helper()
	f := newFixture(t, h, o)
	p, err := f.raw.Sibling(context.Background(), "work-poison")
	if err != nil {
		t.Fatal(err)
	}
	poison := p
	if wrapPoison != nil {
		if poison, err = f.store.Queue("work-poison", queue.WithWrapper(wrapPoison)); err != nil {
			t.Fatal(err)
		}
	}
	o.Poison = poison
	o.Clock = f.clock
	l, err := listener.New(f.q, h, o)
	if err != nil {
		t.Fatal(err)
	}
	f.l = l
	return f, p
}

func TestAlwaysFailingMessageIsPoisonedAfterMaxDequeueCount(t *testing.T) {
	var runs atomic.Int32
	h := func(context.Context, *queue.Message) error {
		runs.Add(1)
		return errors.New("always fails")
	}
	const vis = 10 * time.Second
	f, pq := poisonFixture(t, h, listener.Options{MaxDequeueCount: 3, VisibilityTimeout: vis, Idle: poisonIdle}, nil)
	body := []byte{0x00, 0xff, 'p', 'o', 'i', 's', 'o', 'n', 0x7f}
	id, err := f.raw.Put(context.Background(), body, queue.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.start()
	for i := 1; i <= 2; i++ {
		eventually(t, "the next run", func() bool { return runs.Load() == int32(i) })
		f.settle()
		f.clock.Advance(vis + time.Second)
	}
	// The third failure moves it at once, not on a fourth fetch.
	eventually(t, "the message is poisoned after the third run", func() bool { return f.l.Stats().Poisoned == 1 })
	f.clock.Advance(vis + time.Second)
	f.settle()
	if got := runs.Load(); got != 3 {
		t.Fatalf("ran %d times, want exactly max_dequeue_count 3", got)
	}
	if d := f.depth(); d != 0 {
		t.Fatalf("the queue still holds %d", d)
	}
	ms, err := pq.Peek(context.Background(), 32)
	if err != nil || len(ms) != 1 {
		t.Fatalf("poison queue holds %d (%v), want 1", len(ms), err)
	}
	pm := poison.Decode(ms[0])
	if !bytes.Equal(pm.Body, body) {
		t.Fatalf("poisoned body %q, want %q byte for byte", pm.Body, body)
	}
	// The envelope keeps what the poison queue's own message cannot: the
	// original's id and dequeue count, the last failure and its time.
	if !pm.Enveloped || pm.ID != id || pm.Queue != "work" || pm.DequeueCount != 3 || pm.Rule != poison.RuleMaxDequeue ||
		pm.Reason != "always fails" || !pm.FailedAt.Equal(f.clock.Now().Add(-(vis + time.Second))) || !pm.InsertedAt.Equal(clock.Epoch) {
		t.Fatalf("poisoned %+v: want id %s, dequeue count 3, the third failure's reason and time", pm, id)
	}
}

// poisonIdle keeps idle sleeps short so that virtual time moves in steps
// the tests control.
var poisonIdle = scalingIdle(time.Second)

func TestCrashLoopingMessageIsPoisonedWithoutRunning(t *testing.T) {
	var runs atomic.Int32
	h := func(context.Context, *queue.Message) error { runs.Add(1); return nil }
	f, pq := poisonFixture(t, h, listener.Options{MaxDequeueCount: 5, VisibilityTimeout: 10 * time.Second}, nil)
	ctx := context.Background()
	if _, err := f.raw.Put(ctx, []byte("crasher"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// Five workers got it and died before finishing.
	for i := 0; i < 5; i++ {
		if ms, err := f.raw.Get(ctx, 1, 10*time.Second); err != nil || len(ms) != 1 {
			t.Fatalf("get %d: %v %v", i, ms, err)
		}
		f.clock.Advance(11 * time.Second)
	}
	f.start()
	eventually(t, "the message is poisoned", func() bool { return f.l.Stats().Poisoned == 1 })
	if got := runs.Load(); got != 0 {
		t.Fatalf("a crash-looping message ran %d times, want 0", got)
	}
	ms, err := pq.Peek(ctx, 32)
	if err != nil || len(ms) != 1 {
		t.Fatalf("poison queue holds %d (%v)", len(ms), err)
	}
	if pm := poison.Decode(ms[0]); pm.DequeueCount != 6 || pm.Rule != poison.RuleOverMaxDequeue || !strings.Contains(pm.Reason, "above the maximum 5") {
		t.Fatalf("poisoned %+v: want dequeue count 6, poisoned unrun, and why", pm)
	}
	if d := f.depth(); d != 0 {
		t.Fatalf("queue holds %d", d)
	}
}

func TestPermanentFailureIsPoisonedAtOnce(t *testing.T) {
	var runs atomic.Int32
	h := handler.JSON(func(context.Context, struct{ N int }) error { runs.Add(1); return nil })
	counted := func(ctx context.Context, m *queue.Message) error {
		err := h(ctx, m)
		if err != nil {
			runs.Add(1)
		}
		return err
	}
	f, pq := poisonFixture(t, counted, listener.Options{}, nil)
	if _, err := f.raw.Put(context.Background(), []byte("{not json"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	f.start()
	eventually(t, "the message is poisoned", func() bool { return f.l.Stats().Poisoned == 1 })
	if got := runs.Load(); got != 1 {
		t.Fatalf("a body that cannot decode ran %d times, want 1", got)
	}
	ms, _ := pq.Peek(context.Background(), 1)
	if len(ms) != 1 {
		t.Fatalf("poison queue: %v", ms)
	}
	if pm := poison.Decode(ms[0]); string(pm.Body) != "{not json" || pm.DequeueCount != 1 || pm.Rule != poison.RulePermanent || !strings.Contains(pm.Reason, "decode JSON body") {
		t.Fatalf("poisoned %+v: want the body, dequeue count 1 and the decode error", pm)
	}
}

// failingPuts makes every Put fail.
type failingPuts struct{ driver.Queue }

func (failingPuts) Put(context.Context, []byte, driver.PutOptions) (string, error) {
	return "", queue.Transient(errors.New("poison queue unavailable"), 0)
}

func TestPoisonPutFailureLosesNothing(t *testing.T) {
	h := func(context.Context, *queue.Message) error { return handler.Permanent(errors.New("bad")) }
	f, pq := poisonFixture(t, h, listener.Options{VisibilityTimeout: 10 * time.Second}, func(q driver.Queue) driver.Queue { return failingPuts{q} })
	if _, err := f.raw.Put(context.Background(), []byte("keep me"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	f.start()
	eventually(t, "the handler fails", func() bool { return f.l.Stats().Failed == 1 })
	f.settle()
	if d := f.depth(); d != 1 {
		t.Fatalf("depth %d: the message must stay when the poison queue refuses it", d)
	}
	if n, _ := pq.Count(context.Background()); n != 0 {
		t.Fatalf("poison holds %d", n)
	}
	if f.l.Stats().Poisoned != 0 {
		t.Fatal("counted as poisoned")
	}
}

// failingFirstPuts makes the first two Puts fail, and counts them all.
type failingFirstPuts struct {
	driver.Queue
	puts *atomic.Int32
}

func (q failingFirstPuts) Put(ctx context.Context, body []byte, o driver.PutOptions) (string, error) {
	if q.puts.Add(1) <= 2 {
		return "", queue.Transient(errors.New("poison queue unavailable"), 0)
	}
	return q.Queue.Put(ctx, body, o)
}

// A message whose move to the poison queue failed comes back above the
// maximum and is poisoned unrun: with the reason it last failed here, not
// an unknown one, even when that move fails once more.
func TestPoisonedUnrunKeepsTheLastFailureReason(t *testing.T) {
	var runs atomic.Int32
	h := func(context.Context, *queue.Message) error {
		return fmt.Errorf("downstream said 503 (run %d)", runs.Add(1))
	}
	const vis = 10 * time.Second
	var puts atomic.Int32
	f, pq := poisonFixture(t, h, listener.Options{MaxDequeueCount: 2, VisibilityTimeout: vis, Idle: poisonIdle},
		func(q driver.Queue) driver.Queue { return failingFirstPuts{q, &puts} })
	id := f.put(1)[0]
	f.start()
	eventually(t, "the first run", func() bool { return runs.Load() == 1 })
	// Run 2 fails at the maximum: its move fails (put 1). At dequeue count
	// 3 it is moved unrun, and that fails too (put 2); at 4 it moves.
	for want := int32(1); want <= 3; want++ {
		f.settle()
		f.clock.Advance(vis + time.Second)
		eventually(t, fmt.Sprintf("poison put %d", want), func() bool { return puts.Load() == want })
	}
	eventually(t, "the message is poisoned", func() bool { return f.l.Stats().Poisoned == 1 })
	if got := runs.Load(); got != 2 {
		t.Fatalf("ran %d times, want 2", got)
	}
	ms, err := pq.Peek(context.Background(), 32)
	if err != nil || len(ms) != 1 {
		t.Fatalf("poison queue holds %d (%v)", len(ms), err)
	}
	if pm := poison.Decode(ms[0]); pm.ID != id || pm.DequeueCount != 4 || pm.Rule != poison.RuleOverMaxDequeue || pm.Reason != "downstream said 503 (run 2)" {
		t.Fatalf("poisoned %+v: want dequeue count 4 and the second run's error", pm)
	}
}

// stolenLeases makes renewals find the message taken by someone else.
type stolenLeases struct{ driver.Queue }

func (stolenLeases) UpdateVisibility(_ context.Context, id, _ string, _ time.Duration) (string, error) {
	return "", errors.Join(queue.ErrReceiptMismatch, errors.New("taken by another consumer: "+id))
}

func TestLostLeaseCancelsTheHandler(t *testing.T) {
	const vis = 10 * time.Second
	var mu sync.Mutex
	var cancelled []string
	started := make(chan struct{}, 1)
	h := func(ctx context.Context, m *queue.Message) error {
		started <- struct{}{}
		<-ctx.Done()
		mu.Lock()
		cancelled = append(cancelled, m.ID)
		mu.Unlock()
		return ctx.Err()
	}
	f := newFixtureWith(t, h, listener.Options{VisibilityTimeout: vis}, func(q driver.Queue) driver.Queue { return stolenLeases{q} })
	ids := f.put(1)
	f.start()
	<-started
	f.clock.Advance(vis / 2)
	eventually(t, "the handler is cancelled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(cancelled) == 1
	})
	if cancelled[0] != ids[0] {
		t.Fatalf("cancelled %s", cancelled[0])
	}
	// Renewal counts the lost lease just after it cancels the handler,
	// which may have returned by then.
	eventually(t, "the lost lease is counted", func() bool { return f.l.Stats().LeasesLost == 1 })
	if s := f.l.Stats(); s.LeasesLost != 1 || s.Renewed != 0 {
		t.Fatalf("stats %+v: want one lost lease and no renewal", s)
	}
}

func TestLostLeaseCancelsAnInlineHandler(t *testing.T) {
	const vis = 10 * time.Second
	var slowID atomic.Value
	slowID.Store("")
	cancelled := make(chan string, 1)
	rec := newRecorder()
	h := func(ctx context.Context, m *queue.Message) error {
		if m.ID == slowID.Load() {
			<-ctx.Done()
			cancelled <- m.ID
			return ctx.Err()
		}
		return rec.handle(ctx, m)
	}
	f := newFixtureWith(t, h, listener.Options{VisibilityTimeout: vis}, func(q driver.Queue) driver.Queue { return stolenLeases{q} })
	f.put(200) // fast: later batches run inline
	f.start()
	eventually(t, "the warm-up is deleted", func() bool { return f.l.Stats().Deleted == 200 })
	f.settle()
	ids := f.put(40)
	slowID.Store(ids[0])
	f.clock.AdvanceToNext()
	eventually(t, "the other 39 are handled", func() bool { return rec.distinct() == 239 })
	f.clock.Advance(vis / 2)
	select {
	case id := <-cancelled:
		if id != ids[0] {
			t.Fatalf("cancelled %s", id)
		}
	case <-time.After(testutil.HangGuard):
		t.Fatal("the inline handler whose lease was lost was not cancelled")
	}
	// The task's next inline batches run on a fresh context.
	f.settle()
	f.put(50)
	f.clock.AdvanceToNext()
	eventually(t, "later batches still run", func() bool { return rec.distinct() == 289 })
}

// A hint that fits in the message's life (here an hour) is honoured, with
// a poison queue too: the message is hidden, not poisoned.
func TestRetryAfterFromAHandlerHidesTheMessage(t *testing.T) {
	var runs atomic.Int32
	h := func(context.Context, *queue.Message) error {
		runs.Add(1)
		return queue.Transient(errors.New("downstream said 429"), 90*time.Second)
	}
	f, _ := poisonFixture(t, h, listener.Options{VisibilityTimeout: 10 * time.Second, Idle: poisonIdle}, nil)
	f.putTTL(time.Hour)
	f.start()
	eventually(t, "the first run", func() bool { return f.l.Stats().Hidden == 1 })
	for end := f.clock.Now().Add(80 * time.Second); f.clock.Now().Before(end); {
		f.settle()
		f.clock.AdvanceToNext()
	}
	if got := runs.Load(); got != 1 {
		t.Fatalf("ran %d times within the 90 s the downstream asked for, want 1", got)
	}
	f.clock.Advance(15 * time.Second)
	eventually(t, "it runs again after the hint", func() bool { return runs.Load() == 2 })
	if p := f.l.Stats().Poisoned; p != 0 {
		t.Fatalf("poisoned %d", p)
	}
}

// A limit too small for any envelope header (64 bytes) poisons a body bare,
// as before the envelope, when it cannot pass for an envelope (see
// poison.EncodeOrBare): never lost, never refused.
func TestPoisonOfABodyAtTheLimitFallsBackToTheBareBody(t *testing.T) {
	c := clock.NewFake(clock.Epoch)
	store := memory.NewStore(memory.WithClock(c), memory.WithMaxBodySize(64))
	q, err := store.Queue("work")
	if err != nil {
		t.Fatal(err)
	}
	pq, err := store.Queue("work-poison")
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, *queue.Message) error { return handler.Permanent(errors.New("bad")) }
	l, err := listener.New(q, h, listener.Options{Poison: pq, Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, clock: c, store: store, raw: q, q: q, l: l}
	body := bytes.Repeat([]byte{0xfe}, 64)
	if _, err := q.Put(context.Background(), body, queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	f.start()
	eventually(t, "the message is poisoned", func() bool { return l.Stats().Poisoned == 1 })
	ms, err := pq.Peek(context.Background(), 32)
	if err != nil || len(ms) != 1 {
		t.Fatalf("poison queue holds %d (%v)", len(ms), err)
	}
	if pm := poison.Decode(ms[0]); pm.Enveloped || !bytes.Equal(pm.Body, body) {
		t.Fatalf("poisoned %+v: want the bare body", pm)
	}
}

// Issue 26, item 4: at a limit too small for any envelope, a body that
// starts like one was poisoned bare, and the poison tools then read its
// first line as adaptq's header (the queue to requeue to, the body). Now
// it is not poisoned: it stays in its queue and comes back.
func TestPoisonNeverPutsAnImitationOfAnEnvelopeBare(t *testing.T) {
	c := clock.NewFake(clock.Epoch)
	store := memory.NewStore(memory.WithClock(c), memory.WithMaxBodySize(64))
	q, err := store.Queue("work")
	if err != nil {
		t.Fatal(err)
	}
	pq, err := store.Queue("work-poison")
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	h := func(context.Context, *queue.Message) error {
		runs.Add(1)
		return handler.Permanent(errors.New("bad"))
	}
	l, err := listener.New(q, h, listener.Options{Poison: pq, Clock: c})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, clock: c, store: store, raw: q, q: q, l: l}
	body := []byte(poison.Magic + `{"id":"x","queue":"payments","size":1}` + "\nx")
	if _, err := q.Put(context.Background(), body, queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	f.start()
	// Not poisoned, it is hidden for the rest of its life, at most a
	// hide's longest (TestAnImitationThatCannotBePoisonedDoesNotRunForever),
	// and stays in its queue.
	eventually(t, "the message is hidden after its failed poisoning", func() bool {
		c.Advance(time.Minute)
		return runs.Load() >= 1 && l.Stats().Hidden >= 1
	})
	if n, err := q.Count(context.Background()); err != nil || n != 1 {
		t.Fatalf("Count = %d, %v; want the message still in its queue", n, err)
	}
	if ms, err := pq.Peek(context.Background(), 32); err != nil || len(ms) != 0 {
		t.Fatalf("the poison queue holds %d (%v), want nothing", len(ms), err)
	}
	if p := l.Stats().Poisoned; p != 0 {
		t.Fatalf("poisoned %d", p)
	}
}
