package listener_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// Review of issue 11 (it failed before the fix). doc: "an inline batch not finished after stallAfter
// ... hands the task's loop to a new goroutine, so one slow message holds
// back neither the rest of its batch nor the task's next get". When the
// slow message is the last of an inline batch, the inline runner has not
// settled the batch-mates it already finished (it settles once, at the
// end), so the handed-off loop waits in waitBelow on the slow message.
func TestInlineHandOffFreesTheNextGet(t *testing.T) {
	gate := make(chan struct{})
	started := make(chan struct{})
	var slow string
	slowSet := make(chan struct{})
	rec := newRecorder()
	h := func(ctx context.Context, m *queue.Message) error {
		select {
		case <-slowSet:
			if m.ID == slow {
				close(started)
				<-gate
			}
		default:
		}
		return rec.handle(ctx, m)
	}
	f := newFixture(t, h, listener.Options{Tasks: 1, BatchSize: 4}) // threshold 2
	warmUp(t, f)
	ids := f.put(8) // batch A: 0 1 2 3(slow); batch B: 4 5 6 7
	slow = ids[3]
	close(slowSet)
	f.clock.AdvanceToNext()
	<-started
	defer close(gate)
	ok := true
	deadline := time.Now().Add(2 * time.Second)
	for rec.count(ids[4]) == 0 {
		if time.Now().After(deadline) {
			ok = false
			break
		}
		time.Sleep(time.Millisecond)
	}
	st, _ := f.l.State(context.Background())
	if !ok {
		t.Fatalf("the next batch was not fetched in 2 s while the last message of the inline batch blocks: "+
			"in flight %d (3 of them finished long ago), processed %d", st.InFlight, st.Processed)
	}
}

// flakyRenewals fails the first UpdateVisibility with a transient error and
// holds the second until release is closed (a call with some latency).
type flakyRenewals struct {
	driver.Queue
	calls   atomic.Int32
	entered chan struct{}
	release chan struct{}
	now     func() time.Time
	at      time.Time // when the second call came
}

func (q *flakyRenewals) UpdateVisibility(ctx context.Context, id, receipt string, d time.Duration) (string, error) {
	switch q.calls.Add(1) {
	case 1:
		return "", queue.Transient(errors.New("injected 503"), 0)
	case 2:
		q.at = q.now()
		close(q.entered)
		<-q.release
	}
	return q.Queue.UpdateVisibility(ctx, id, receipt, d)
}

// Review of issue 11 (it failed before the fix): a renewal that fails transiently is retried only
// at the next renewal time, vis/2 later: exactly when the lease ends. Any
// latency on that retry, and a competing consumer that polls at that
// moment, takes the message while its handler still runs (lease lost,
// handler cancelled, the message runs twice). One 503 should not cost the
// whole margin: retry at the next tick (<= flushAfter) or with a backoff.
func TestFailedRenewalIsRetriedBeforeTheLeaseEnds(t *testing.T) {
	const vis = 10 * time.Second
	fr := &flakyRenewals{entered: make(chan struct{}), release: make(chan struct{})}
	running := make(chan struct{})
	cancelled := make(chan struct{})
	h := func(ctx context.Context, m *queue.Message) error {
		close(running)
		<-ctx.Done()
		close(cancelled)
		return ctx.Err()
	}
	f := newFixtureWith(t, h, listener.Options{VisibilityTimeout: vis, Dispatch: listener.DispatchParallel},
		func(q driver.Queue) driver.Queue { fr.Queue = q; return fr })
	fr.now = f.clock.Now
	f.put(1)
	t0 := f.clock.Now()
	f.start()
	<-running
	// Step the clock a second at a time until the retry is on its way.
	for f.clock.Now().Sub(t0) < 2*vis {
		select {
		case <-fr.entered:
		default:
			time.Sleep(20 * time.Millisecond) // let maintain re-arm
			f.clock.Advance(time.Second)
			continue
		}
		break
	}
	at := fr.at.Sub(t0)
	// The retry is held (latency); meanwhile another consumer polls.
	ms, err := f.raw.Get(context.Background(), 1, vis)
	if err != nil {
		t.Fatal(err)
	}
	close(fr.release)
	if len(ms) > 0 {
		select {
		case <-cancelled:
		case <-time.After(2 * time.Second):
		}
		t.Fatalf("after one failed renewal (at vis/2) the retry came at %s, the end of the %s lease: another consumer got the message (dequeue count %d) while its handler ran; lost leases %d",
			at, vis, ms[0].DequeueCount, f.l.Stats().LeasesLost)
	}
}

// hungRenewals holds the first renewal (an UpdateVisibility that does not
// release) until its context ends, and records whether it had a deadline.
type hungRenewals struct {
	driver.Queue
	calls       atomic.Int32
	hadDeadline atomic.Bool
	ended       chan struct{}
}

func (q *hungRenewals) UpdateVisibility(ctx context.Context, id, receipt string, d time.Duration) (string, error) {
	if d > 0 && q.calls.Add(1) == 1 {
		_, ok := ctx.Deadline()
		q.hadDeadline.Store(ok)
		<-ctx.Done()
		close(q.ended)
		return "", ctx.Err()
	}
	return q.Queue.UpdateVisibility(ctx, id, receipt, d)
}

// Review of issue 11 (it hung before the fix): renewal holds the batch's
// lock across its calls, so a renewal call that never returns blocked
// every settle of the batch, and the batch itself, for good. Each pass of
// calls now has a deadline (a quarter of the visibility timeout), and
// what it did not renew is tried again soon.
func TestHungRenewalIsBounded(t *testing.T) {
	const vis = 200 * time.Millisecond
	hq := &hungRenewals{ended: make(chan struct{})}
	release := make(chan struct{})
	h := func(ctx context.Context, m *queue.Message) error {
		<-release
		return nil
	}
	f := newFixtureWith(t, h, listener.Options{VisibilityTimeout: vis, Dispatch: listener.DispatchParallel},
		func(q driver.Queue) driver.Queue { hq.Queue = q; return hq })
	f.put(1)
	f.start()
	eventually(t, "the handler runs", func() bool { st, _ := f.l.State(context.Background()); return st.InFlight == 1 })
	f.clock.Advance(vis / 2)
	select {
	case <-hq.ended:
	case <-time.After(10 * time.Second): // a hang, not a timing bound
		close(release)
		t.Fatal("a renewal call that never returns was not given up")
	}
	if !hq.hadDeadline.Load() {
		t.Fatal("the renewal call had no deadline")
	}
	// The next pass, soon after, renews it.
	eventually(t, "the renewal is retried", func() bool {
		f.clock.Advance(vis / 16)
		return f.l.Stats().Renewed > 0
	})
	close(release)
	eventually(t, "the message is deleted", func() bool { return f.l.Stats().Deleted == 1 })
}

// failedDeletes fails the first Delete of the queue with a non-transient
// error.
type failedDeletes struct {
	driver.Queue
	calls atomic.Int32
}

func (q *failedDeletes) Delete(ctx context.Context, id, receipt string) error {
	if q.calls.Add(1) == 1 {
		return errors.New("injected delete failure")
	}
	return q.Queue.Delete(ctx, id, receipt)
}

// Review of issue 11 (it failed before the fix): a poisoned message whose
// delete failed was counted poisoned, then again when it came back and was
// poisoned for good, so Drained counted one message twice.
func TestPoisonedIsCountedOnceWhenItsDeleteFails(t *testing.T) {
	h := func(context.Context, *queue.Message) error { return handler.Permanent(errors.New("bad")) }
	const vis = time.Second
	f := newFixtureWith(t, h, listener.Options{VisibilityTimeout: vis}, func(q driver.Queue) driver.Queue { return &failedDeletes{Queue: q} })
	poison, err := f.raw.Sibling(context.Background(), "work-poison")
	if err != nil {
		t.Fatal(err)
	}
	l, err := listener.New(f.q, h, listener.Options{VisibilityTimeout: vis, Poison: poison, Clock: f.clock,
		RetryDelay: func(*queue.Message, error) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	f.l = l
	f.put(1)
	f.start()
	eventually(t, "the first poisoning is tried", func() bool { n, _ := poison.Count(context.Background()); return n == 1 })
	if got := f.l.Stats().Poisoned; got != 0 {
		t.Fatalf("poisoned %d with its delete failed: it is still in the queue", got)
	}
	eventually(t, "it comes back and is poisoned", func() bool {
		f.clock.AdvanceToNext()
		return f.depth() == 0
	})
	if st := f.l.Stats(); st.Poisoned != 1 || f.l.Drained() != 1 {
		t.Fatalf("poisoned %d, drained %d: want 1 and 1", st.Poisoned, f.l.Drained())
	}
}
