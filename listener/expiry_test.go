package listener_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
)

// putTTL puts one message that lives for ttl.
func (f *fixture) putTTL(ttl time.Duration) string {
	f.t.Helper()
	id, err := f.raw.Put(context.Background(), []byte("short-lived"), queue.PutOptions{TTL: ttl})
	if err != nil {
		f.t.Fatal(err)
	}
	return id
}

// onlyPoison reads the one message of the poison queue pq.
func onlyPoison(t *testing.T, pq *queue.Queue) poison.Message {
	t.Helper()
	ms, err := pq.Peek(context.Background(), 32)
	if err != nil || len(ms) != 1 {
		t.Fatalf("poison queue holds %d (%v), want 1", len(ms), err)
	}
	return poison.Decode(ms[0])
}

// A downstream's Retry-After longer than the message has to live would
// hide it past its expiry: it would never be delivered, processed or
// poisoned. It is poisoned at once instead, with the reason.
func TestRetryAfterPastTheMessagesExpiryPoisonsIt(t *testing.T) {
	var runs atomic.Int32
	h := func(context.Context, *queue.Message) error {
		runs.Add(1)
		return queue.Transient(errors.New("503 Service Unavailable"), 7*24*time.Hour)
	}
	o, logs := observed(listener.Options{VisibilityTimeout: 10 * time.Second, Idle: poisonIdle})
	f, pq := poisonFixture(t, h, o, nil)
	id := f.putTTL(time.Hour)
	f.start()
	eventually(t, "the message leaves its queue", func() bool { return f.l.Stats().Poisoned == 1 || f.l.Stats().Hidden == 1 })
	if s := f.l.Stats(); s.Poisoned != 1 || s.Hidden != 0 {
		t.Fatalf("stats %+v: want the message poisoned, not hidden past its expiry", s)
	}
	pm := onlyPoison(t, pq)
	if pm.ID != id || pm.Rule != poison.RuleExpiring || !strings.Contains(pm.Reason, "503 Service Unavailable") ||
		!strings.Contains(pm.Reason, "Retry-After") || !strings.Contains(pm.Reason, "expires in") {
		t.Fatalf("poisoned %+v: want rule %s and a reason with the error and why", pm, poison.RuleExpiring)
	}
	if n := len(logs.FilterMessage(failedMsg).All()); n != 0 {
		t.Errorf("%d lines say the message will run again; it was poisoned", n)
	}
	if runs.Load() != 1 {
		t.Errorf("ran %d times", runs.Load())
	}
}

// Without a poison queue, adaptq's own delays (here the permanent-failure
// backoff of 10 minutes) are cut so that the message runs again before it
// expires, and the line says so.
func TestOwnRetryDelayIsCutBelowTheMessagesExpiry(t *testing.T) {
	var runs atomic.Int32
	h := func(context.Context, *queue.Message) error {
		runs.Add(1)
		return handler.Permanent(errors.New("cannot ever work"))
	}
	o, logs := observed(listener.Options{VisibilityTimeout: 5 * time.Second, Idle: poisonIdle})
	f := newFixture(t, h, o)
	f.putTTL(3 * time.Minute)
	expiry := f.clock.Now().Add(3 * time.Minute)
	f.start()
	eventually(t, "the first run", func() bool { return runs.Load() == 1 })
	for runs.Load() < 2 && f.clock.Now().Before(expiry) {
		f.settle()
		f.clock.AdvanceToNext()
	}
	if runs.Load() < 2 {
		t.Fatalf("the message ran %d time(s) before it expired: its %s retry delay hid it past its 3-minute life", runs.Load(), listener.DefaultPermanentRetryDelay)
	}
	lines := logs.FilterMessage(permanentMsg).All()
	if len(lines) == 0 {
		t.Fatalf("no failure line: %v", logs.All())
	}
	fields := lines[0].ContextMap()
	if fields["retry_delay"] != listener.DefaultPermanentRetryDelay || fields["delay"] == nil || fields["delay"].(time.Duration) >= 3*time.Minute {
		t.Errorf("failure line %v: want the delay cut below 3m and the retry delay asked for", fields)
	}
}

// A failure with no hint leaves the message to reappear when its visibility
// timeout ends; when that is after its expiry, it is handed back sooner,
// to run again first.
func TestFailureNearExpiryRunsAgainBeforeTheMessageExpires(t *testing.T) {
	var runs atomic.Int32
	h := func(context.Context, *queue.Message) error {
		if runs.Add(1) == 1 {
			return errors.New("first try fails")
		}
		return nil
	}
	f := newFixture(t, h, listener.Options{VisibilityTimeout: 30 * time.Second, Idle: poisonIdle})
	f.putTTL(20 * time.Second)
	expiry := f.clock.Now().Add(20 * time.Second)
	f.start()
	eventually(t, "the first run", func() bool { return runs.Load() == 1 })
	for f.l.Stats().Processed == 0 && f.clock.Now().Before(expiry) {
		f.settle()
		f.clock.AdvanceToNext()
	}
	if f.l.Stats().Processed != 1 {
		t.Fatalf("the message did not run again before its expiry (stats %+v): its 30 s visibility timeout outlasted its 20 s life", f.l.Stats())
	}
}

// A message that expired while its handler ran, and then failed, would be
// gone: it is poisoned (it is in hand), and the line never says it will
// run again.
func TestMessageThatExpiredWhileItsHandlerRanIsPoisoned(t *testing.T) {
	for _, withPoison := range []bool{true, false} {
		name := "no poison queue"
		if withPoison {
			name = "poison queue"
		}
		t.Run(name, func(t *testing.T) {
			running := make(chan struct{})
			release := make(chan struct{})
			h := func(context.Context, *queue.Message) error {
				close(running)
				<-release
				return errors.New("downstream timed out")
			}
			o, logs := observed(listener.Options{VisibilityTimeout: time.Minute, Idle: poisonIdle})
			var f *fixture
			var pq *queue.Queue
			if withPoison {
				f, pq = poisonFixture(t, h, o, nil)
			} else {
				f = newFixture(t, h, o)
			}
			id := f.putTTL(10 * time.Second)
			f.start()
			<-running
			f.clock.Advance(15 * time.Second)
			close(release)
			eventually(t, "the failure is settled", func() bool {
				st, _ := f.l.State(context.Background())
				return st.Failed == 1 && st.InFlight == 0
			})
			if n := len(logs.FilterMessage(failedMsg).All()); n != 0 {
				t.Errorf("a line says the expired message will run again: %v", logs.All())
			}
			if !withPoison {
				if n := len(logs.FilterMessage("listener: handler failed after the message expired; it will not run again").All()); n != 1 {
					t.Errorf("no line says the message will not run again: %v", logs.All())
				}
				return
			}
			if p := f.l.Stats().Poisoned; p != 1 {
				t.Fatalf("poisoned %d, want 1", p)
			}
			if pm := onlyPoison(t, pq); pm.ID != id || pm.Rule != poison.RuleExpiring || !strings.Contains(pm.Reason, "downstream timed out") {
				t.Fatalf("poisoned %+v", pm)
			}
		})
	}
}

// Without a poison queue, a message that keeps failing as its expiry nears
// runs again only while a retry hidden at least MinRetryHide can still be
// got before the expiry; its last failure line says it will not run again,
// rather than the message being retried at ever shorter intervals.
func TestFailingNearExpiryWithoutPoisonQueueStopsAtTheFloor(t *testing.T) {
	var mu sync.Mutex
	var runs []time.Time
	var f *fixture
	h := func(context.Context, *queue.Message) error {
		mu.Lock()
		runs = append(runs, f.clock.Now())
		mu.Unlock()
		return errors.New("downstream unavailable")
	}
	o, logs := observed(listener.Options{VisibilityTimeout: 30 * time.Second, Idle: poisonIdle, MaxDequeueCount: 1000, FailureLogLines: -1})
	f = newFixture(t, h, o)
	f.putTTL(time.Minute)
	expiry := f.clock.Now().Add(time.Minute)
	f.start()
	eventually(t, "the first run", func() bool { mu.Lock(); defer mu.Unlock(); return len(runs) == 1 })
	for f.clock.Now().Before(expiry.Add(time.Second)) {
		f.settle()
		f.clock.AdvanceToNext()
	}
	f.settle()
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(runs); i++ {
		if d := runs[i].Sub(runs[i-1]); d < listener.MinRetryHide {
			t.Errorf("run %d of %d came %s after the one before, below the %s floor", i+1, len(runs), d, listener.MinRetryHide)
		}
	}
	lines := logs.FilterMessage(tooLateMsg).All()
	if len(lines) != 1 {
		t.Fatalf("%d lines say the message will not run again, want 1 (after %d runs): %v", len(lines), len(runs), logs.All())
	}
	if fields := lines[0].ContextMap(); fields["dequeue_count"] != int64(len(runs)) {
		t.Errorf("the line %v is not about the last run (%d)", fields, len(runs))
	}
}
