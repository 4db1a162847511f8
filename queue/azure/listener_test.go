package azure_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/queue/queuetest"
	"github.com/adaptq/adaptq/scaling"
)

const (
	// e2eDrain is how many messages TestListenerEndToEnd drains: 1,000
	// are 31 full batches over 8 tasks, enough for every check it makes
	// (each handled once, one Delete call per message, batched Gets);
	// 2,000 only doubled its time on the package's serial path.
	e2eDrain = 1000
	// e2eMessages is how many TestListenerFaults drains: its faults, on
	// every 10th request of a kind, need some 2,100 requests.
	e2eMessages = 2000
	e2eTasks    = 8
	// listenerFaults is how many faults TestListenerFaults injects: 25 of
	// each kind, on every 10th request of a kind (a drain makes some
	// 2,100, most of them deletes).
	listenerFaults = 100
)

// handled counts handler runs per message id.
type handled struct {
	mu   sync.Mutex
	runs map[string]int
}

func (h *handled) handle(_ context.Context, m *queue.Message) error {
	h.mu.Lock()
	h.runs[m.ID]++
	h.mu.Unlock()
	return nil
}

// missing is how many of ids have not been handled yet.
func (h *handled) missing(ids map[string]bool) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for id := range ids {
		if h.runs[id] == 0 {
			n++
		}
	}
	return n
}

// listenerOptions are quick to react: a short idle backoff so the drain's
// tail is not spent asleep, and a short error backoff.
func listenerOptions(vis time.Duration) listener.Options {
	return listener.Options{
		Tasks:               e2eTasks,
		MaxTasks:            e2eTasks,
		MinTasks:            e2eTasks,
		BatchSize:           queue.MaxBatchSize,
		Concurrency:         e2eTasks * 2 * queue.MaxBatchSize,
		VisibilityTimeout:   vis,
		Idle:                scaling.IdleBackoff{Min: 10 * time.Millisecond, Max: 250 * time.Millisecond, Delta: 10 * time.Millisecond},
		ErrorBackoffInitial: 20 * time.Millisecond,
		ErrorBackoffMax:     500 * time.Millisecond,
		ShutdownGrace:       5 * time.Second,
	}
}

// stallGuard is how long runUntil waits without progress (a handler run,
// a delete) before it calls the listener stuck. A hang guard, not a speed
// test: on a busy machine a drain takes what it takes, as long as it moves.
const stallGuard = 3 * time.Minute

// runUntil runs l until done reports true (checked every 100 ms); it
// fails the test if Run returned on its own, or if the listener made no
// progress for stallGuard.
func runUntil(t *testing.T, l *listener.Listener, done func() bool) {
	t.Helper()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	exited := make(chan error, 1)
	go func() { exited <- l.Run(rctx) }()
	progress := func() int64 { st := l.Stats(); return st.Processed + st.Deleted }
	last, lastAt := progress(), time.Now()
	for !done() {
		select {
		case err := <-exited:
			t.Fatalf("the listener exited on its own: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		if p := progress(); p != last {
			last, lastAt = p, time.Now()
		} else if time.Since(lastAt) > stallGuard {
			cancel()
			<-exited
			t.Fatalf("no progress for %s: %+v", stallGuard, l.Stats())
		}
	}
	cancel()
	if err := <-exited; err != nil {
		t.Fatalf("Run after shutdown: %v", err)
	}
}

// TestListenerEndToEnd drains 1,000 messages with the adaptive listener's
// 8 tasks on a metered Azure queue: every message handled once and
// deleted, and the meter's counts are the calls that did it.
func TestListenerEndToEnd(t *testing.T) {
	srv := azuritetest.Shared(t)
	acct := newAccount(t, srv, azure.Config{})
	m := meter.New(0)
	q := openQueue(t, acct, uniq(t, "listener-e2e"), queue.WithObserver(m))
	ids := fill(t, q, e2eDrain)

	h := &handled{runs: map[string]int{}}
	l, err := listener.New(q, h.handle, listenerOptions(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	runUntil(t, l, func() bool { return l.Stats().Deleted >= e2eDrain })
	took := time.Since(start)

	for id := range ids {
		if n := h.runs[id]; n != 1 {
			t.Errorf("message %s handled %d times", id, n)
		}
	}
	if len(h.runs) != e2eDrain {
		t.Errorf("handled %d distinct messages, want %d", len(h.runs), e2eDrain)
	}
	if n, err := q.Count(ctx); err != nil || n != 0 {
		t.Fatalf("Count after the drain = %d, %v", n, err)
	}
	s := m.Snapshot()
	st := l.Stats()
	t.Logf("drained %d in %s (%.0f msgs/s); meter %v, errors %d; listener %+v",
		e2eDrain, took.Round(time.Millisecond), e2eDrain/took.Seconds(), s.Map(), s.TotalErrors(), st)
	switch {
	case s.Calls[meter.Put] != e2eDrain || s.MessagesPut != e2eDrain:
		t.Errorf("meter: %d puts of %d messages, want %d", s.Calls[meter.Put], s.MessagesPut, e2eDrain)
	case s.MessagesGot != e2eDrain:
		t.Errorf("meter: got %d messages, want %d", s.MessagesGot, e2eDrain)
	case s.Calls[meter.Delete] != e2eDrain || s.MessagesDeleted != e2eDrain || s.Calls[meter.DeleteBatch] != 0:
		t.Errorf("meter: %d delete calls (%d batch) deleted %d; Azure has no batch delete, so want one call per message",
			s.Calls[meter.Delete], s.Calls[meter.DeleteBatch], s.MessagesDeleted)
	case s.Calls[meter.Get] < e2eDrain/queue.MaxBatchSize || s.Calls[meter.Get] > e2eDrain/4:
		t.Errorf("meter: %d non-empty gets for %d messages: batching is not at work", s.Calls[meter.Get], e2eDrain)
	case s.TotalErrors() != 0:
		t.Errorf("meter: %d errors without faults", s.TotalErrors())
	case st.Processed != e2eDrain || st.Deleted != e2eDrain:
		t.Errorf("listener: processed %d, deleted %d", st.Processed, st.Deleted)
	}
	// Empty gets are left out: how many a drain's tail makes depends on how
	// fast the machine is, not on batching.
	if cpm := float64(s.Calls[meter.Get]+s.Calls[meter.Delete]) / e2eDrain; cpm > 1.2 {
		t.Errorf("%.2f get and delete calls per message; batched gets should make it about 1.03", cpm)
	}
}

// TestListenerFaults drains 2,000 messages through a proxy that answers
// every 10th request of each kind (get, delete …), listenerFaults times in
// all, in turn with 503 ServerBusy (without and with Retry-After: 1) or
// closes its connection before or after the server acted. No message is
// lost, the listener never exits, and the meter counts the failed calls.
// The faults are bounded by count: they land in the first half of the
// drain, and its tail (the messages that lost Gets hid, back after their
// visibility timeout) is not failed again and again.
func TestListenerFaults(t *testing.T) {
	srv := azuritetest.Shared(t)
	direct := newAccount(t, srv, azure.Config{})
	dq := openQueue(t, direct, uniq(t, "listener-faults"))
	ids := fill(t, dq, e2eMessages)

	p := newFaultProxy(t, srv.QueueEndpoint)
	viaProxy := newAccount(t, srv, azure.Config{QueueEndpoint: proxyEndpoint(p)})
	m := meter.New(0)
	q := openQueue(t, viaProxy, uniq(t, "listener-faults"), queue.WithObserver(m))
	p.ArmEvery(10, listenerFaults, faultBusy, faultBusyRetryAfter(1), queuetest.HangUp, queuetest.LoseAnswer)

	h := &handled{runs: map[string]int{}}
	l, err := listener.New(q, h.handle, listenerOptions(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	runUntil(t, l, func() bool {
		if h.missing(ids) > 0 {
			return false
		}
		n, err := dq.Count(ctx)
		return err == nil && n == 0
	})
	took := time.Since(start)

	s := m.Snapshot()
	st := l.Stats()
	requests, faults := p.Counts()
	dup := 0
	for _, n := range h.runs {
		dup += n - 1
	}
	t.Logf("drained %d in %s with %d re-runs; proxy requests %v faults %v (%d armed left); meter calls %v errors %d (transient %d); listener %+v",
		e2eMessages, took.Round(time.Millisecond), dup, requests, faults, p.Armed(), s.Map(), s.TotalErrors(), s.Transient, st)

	if len(h.runs) != e2eMessages {
		t.Errorf("handled %d distinct messages, want %d", len(h.runs), e2eMessages)
	}
	for id := range h.runs {
		if !ids[id] {
			t.Errorf("handled unknown id %s", id)
		}
	}
	if sum(faults) == 0 {
		t.Fatal("the proxy injected no fault")
	}
	if s.TotalErrors() == 0 || s.Transient == 0 {
		t.Errorf("meter: %d errors, %d transient; want the injected faults counted", s.TotalErrors(), s.Transient)
	}
	if st.GetErrors == 0 || st.TransientErrors == 0 {
		t.Errorf("listener: %d get errors, %d transient; want the injected faults seen", st.GetErrors, st.TransientErrors)
	}
	// Every attempt is a request the meter saw, and every request a call:
	// no hidden retries by the SDK, nor by Go's transport (which resends
	// a GET on its own unless the driver stops it).
	if calls, reqs := s.Total()-s.Calls[meter.Put], int64(sum(requests)-requests["create"]); calls != reqs {
		t.Errorf("meter counts %d calls but the proxy saw %d requests", calls, reqs)
	}
	// Errors are the injected faults, plus the 404s of retried deletes whose
	// first attempt deleted the message but lost its answer (lose_answer):
	// the listener retries a message's failed delete, and counts NotFound;
	// plus the stale receipts of deletes that the faults' retries held back
	// until the 3 s visibility ended and another get took the message (the
	// re-runs logged above).
	if e, max := s.TotalErrors(), int64(sum(faults))+st.NotFound+st.ReceiptMismatches; e > max {
		t.Errorf("meter counts %d errors but the proxy injected %d faults, %d retried deletes found the message gone and %d found it taken again",
			e, sum(faults), st.NotFound, st.ReceiptMismatches)
	}
	// A delete finds its message gone when its first attempt deleted it
	// but lost the answer, or when its retries were held back past the
	// visibility timeout and another get took the message, ran it again
	// and deleted it (a re-run).
	if lost := faults[queuetest.LoseAnswer.Name]; st.NotFound > int64(lost+dup) {
		t.Errorf("%d deletes found the message gone, more than the %d answers lost after the fact and %d re-runs", st.NotFound, lost, dup)
	}
}
