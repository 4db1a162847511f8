package sqs_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/queue/queuetest"
	"github.com/adaptq/adaptq/queue/sqs"
	"github.com/adaptq/adaptq/queue/sqs/sqstest"
	"github.com/adaptq/adaptq/scaling"
)

const (
	e2eMessages = 2000
	e2eTasks    = 8
	// listenerFaults is how many faults TestListenerFaults injects: 8 of
	// each kind, one every 10th request (a drain makes some 450).
	listenerFaults = 40
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

func (h *handled) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.runs)
}

// listenerOptions are quick to react: a short idle backoff so the drain's
// tail is not spent asleep, and a short error backoff.
func listenerOptions(vis time.Duration) listener.Options {
	return listener.Options{
		Tasks:               e2eTasks,
		MaxTasks:            e2eTasks,
		MinTasks:            e2eTasks,
		VisibilityTimeout:   vis,
		Concurrency:         e2eTasks * 2 * sqs.MaxBatch,
		Idle:                scaling.IdleBackoff{Min: 10 * time.Millisecond, Max: 250 * time.Millisecond, Delta: 10 * time.Millisecond},
		ErrorBackoffInitial: 20 * time.Millisecond,
		ErrorBackoffMax:     500 * time.Millisecond,
		ShutdownGrace:       5 * time.Second,
	}
}

// runUntil runs l until done reports true (checked every 100 ms) or the
// deadline passes; it fails the test if Run returned on its own.
func runUntil(t *testing.T, l *listener.Listener, deadline time.Duration, done func() bool) {
	t.Helper()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	exited := make(chan error, 1)
	go func() { exited <- l.Run(rctx) }()
	end := time.Now().Add(deadline)
	for !done() {
		select {
		case err := <-exited:
			t.Fatalf("the listener exited on its own: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(end) {
			cancel()
			<-exited
			t.Fatalf("not done after %s: %+v", deadline, l.Stats())
		}
	}
	cancel()
	if err := <-exited; err != nil {
		t.Fatalf("Run after shutdown: %v", err)
	}
}

// TestListenerEndToEnd drains 2,000 messages with the adaptive listener's
// 8 tasks on a metered SQS queue: every message handled once and deleted
// in batches of 10, and the meter's counts are the calls that did it.
func TestListenerEndToEnd(t *testing.T) {
	t.Parallel()
	srv := sqstest.Shared(t)
	c := newClient(t, srv, sqs.Config{})
	m := meter.New(0)
	q := openQueue(t, c, "listener-e2e", queue.WithObserver(m))
	ids := fill(t, q, e2eMessages)

	h := &handled{runs: map[string]int{}}
	l, err := listener.New(q, h.handle, listenerOptions(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Options().BatchSize; got != sqs.MaxBatch {
		t.Fatalf("the listener asks for %d, want SQS's %d", got, sqs.MaxBatch)
	}
	start := time.Now()
	runUntil(t, l, 3*time.Minute, func() bool { return l.Stats().Deleted >= e2eMessages })
	took := time.Since(start)

	for id := range ids {
		if n := h.runs[id]; n != 1 {
			t.Errorf("message %s handled %d times", id, n)
		}
	}
	if len(h.runs) != e2eMessages {
		t.Errorf("handled %d distinct messages, want %d", len(h.runs), e2eMessages)
	}
	if n, err := q.Count(ctx); err != nil || n != 0 {
		t.Fatalf("Count after the drain = %d, %v", n, err)
	}
	s := m.Snapshot()
	st := l.Stats()
	t.Logf("drained %d in %s (%.0f msgs/s); meter %v, errors %d; listener %+v",
		e2eMessages, took.Round(time.Millisecond), e2eMessages/took.Seconds(), s.Map(), s.TotalErrors(), st)
	switch {
	case s.Calls[meter.Put] != e2eMessages || s.MessagesPut != e2eMessages:
		t.Errorf("meter: %d puts of %d messages, want %d", s.Calls[meter.Put], s.MessagesPut, e2eMessages)
	case s.MessagesGot != e2eMessages:
		t.Errorf("meter: got %d messages, want %d", s.MessagesGot, e2eMessages)
	case s.Calls[meter.Delete] != 0 || s.MessagesDeleted != e2eMessages:
		t.Errorf("meter: %d single deletes, %d deleted; want batch deletes only, all %d", s.Calls[meter.Delete], s.MessagesDeleted, e2eMessages)
	case s.Calls[meter.DeleteBatch] < e2eMessages/sqs.MaxBatch:
		t.Errorf("meter: %d batch deletes for %d messages: more than 10 a call", s.Calls[meter.DeleteBatch], e2eMessages)
	case s.Calls[meter.Get] < e2eMessages/sqs.MaxBatch:
		t.Errorf("meter: %d non-empty gets for %d messages: more than 10 a get", s.Calls[meter.Get], e2eMessages)
	case s.TotalErrors() != s.Errors[meter.GetEmpty] || s.Transient != s.TotalErrors() || st.GetErrors != s.TotalErrors() || st.TransientErrors != st.GetErrors:
		// A get may fail on its own even on the loopback: Go's HTTP/1
		// transport can close a connection under a response it is still
		// reading (the SDK's "HTTP 200: use of closed network connection",
		// aws/aws-sdk-go-v2#2737, which the SDK's default retryer retries
		// and the driver's NopRetryer leaves to the listener). Its messages
		// come back after their visibility timeout, which the handled-once
		// checks above cover. Any other failed call, a get not counted as
		// transient, or one the listener did not see is a defect.
		t.Errorf("meter: %d errors (%d failed gets, %d transient); listener: %d get errors, %d transient: only transient get failures are expected without faults",
			s.TotalErrors(), s.Errors[meter.GetEmpty], s.Transient, st.GetErrors, st.TransientErrors)
	case st.Processed != e2eMessages || st.Deleted != e2eMessages:
		t.Errorf("listener: processed %d, deleted %d", st.Processed, st.Deleted)
	}
}

// TestListenerFaults drains 2,000 messages through a proxy that answers
// every 10th request, listenerFaults times in all, in turn with 500, 503 and
// throttling errors or closes its connection before or after the emulator
// acted. No message is lost, the listener never exits, and every attempt
// is a call the meter saw: the SDK retries nothing.
func TestListenerFaults(t *testing.T) {
	t.Parallel()
	srv := sqstest.Shared(t)
	region := sqstest.NewRegion()
	direct := newClient(t, srv, sqs.Config{Region: region})
	dq := openQueue(t, direct, "listener-faults")
	ids := fill(t, dq, e2eMessages)

	p := newFaultProxy(t, srv.Endpoint)
	viaProxy := newClient(t, srv, sqs.Config{Region: region, Endpoint: p.URL, Timeout: 5 * time.Second})
	m := meter.New(0)
	q := openQueue(t, viaProxy, "listener-faults", queue.WithObserver(m))
	p.ArmEvery(10, listenerFaults, faultInternal, faultUnavailable, faultThrottled, queuetest.HangUp, queuetest.LoseAnswer)

	h := &handled{runs: map[string]int{}}
	l, err := listener.New(q, h.handle, listenerOptions(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	runUntil(t, l, 4*time.Minute, func() bool {
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
	if s.TotalErrors() == 0 || s.Transient == 0 || st.GetErrors == 0 {
		t.Errorf("meter: %d errors, %d transient; listener %d get errors; want the injected faults seen", s.TotalErrors(), s.Transient, st.GetErrors)
	}
	// Every attempt is a request the meter saw: no hidden retries by the
	// SDK (the proxy also saw the open's GetQueueUrl and attributes).
	if calls, reqs := s.Total(), int64(sum(requests)-requests["GetQueueUrl"]-requests["CreateQueue"]-requests["GetQueueAttributes"]); calls > reqs+s.Calls[meter.Count] {
		t.Errorf("meter counts %d calls but the proxy saw %d requests", calls, reqs)
	}
	if e := s.TotalErrors(); e > int64(sum(faults)) {
		t.Errorf("meter counts %d errors but the proxy injected %d faults", e, sum(faults))
	}
}

// TestIdleListenerLongPolls: an idle listener spends its waits in long
// polls (GetWait, WaitTimeSeconds > 0) rather than asleep between short
// gets, and a message put while it waits is handled. Outcomes only: no
// timing is asserted.
func TestIdleListenerLongPolls(t *testing.T) {
	t.Parallel()
	srv := sqstest.Shared(t)
	region := sqstest.NewRegion()
	p := newFaultProxy(t, srv.Endpoint)
	c := newClient(t, srv, sqs.Config{Region: region, Endpoint: p.URL})
	m := meter.New(0)
	q := openQueue(t, c, "idle", queue.WithObserver(m))
	producer := openQueue(t, newClient(t, srv, sqs.Config{Region: region}), "idle")

	h := &handled{runs: map[string]int{}}
	o := listenerOptions(30 * time.Second)
	o.Tasks, o.MinTasks, o.MaxTasks = 1, 1, 1
	o.Idle = scaling.IdleBackoff{Min: time.Second, Max: 2 * time.Second, Delta: 100 * time.Millisecond}
	l, err := listener.New(q, h.handle, o)
	if err != nil {
		t.Fatal(err)
	}
	put := false
	runUntil(t, l, 2*time.Minute, func() bool {
		if r, _ := p.Counts(); r[longPoll] >= 2 && !put {
			if _, err := producer.Put(ctx, []byte("wake"), queue.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			put = true
		}
		return h.count() == 1 && l.Stats().Deleted == 1
	})
	r, _ := p.Counts()
	lp := r[longPoll]
	s := m.Snapshot()
	t.Logf("long polls %d; meter %v", lp, s.Map())
	if lp < 2 {
		t.Fatalf("the idle listener made %d long polls", lp)
	}
}

// A queue with its own RedrivePolicy is left to SQS: Features say so, the
// listener moves nothing to adaptq's poison queue, and SQS moves the
// message to its dead-letter queue after maxReceiveCount receives.
func TestRedrivePolicyWins(t *testing.T) {
	t.Parallel()
	srv := sqstest.Shared(t)
	c := newClient(t, srv, sqs.Config{})
	dlq := openQueue(t, c, "orders-dlq")
	var dd *sqs.Queue
	if !dlq.As(&dd) {
		t.Fatal("As gave no *sqs.Queue")
	}
	attrs, err := c.API().GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(dd.URL()), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.API().CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("orders"), Attributes: map[string]string{
		"RedrivePolicy": `{"deadLetterTargetArn":"` + attrs.Attributes["QueueArn"] + `","maxReceiveCount":"2"}`,
	}})
	if err != nil {
		t.Fatal(err)
	}
	q := openQueue(t, c, "orders")
	if !q.Features().ServerPoison {
		t.Fatal("a queue with a RedrivePolicy does not report ServerPoison")
	}
	if plain := openQueue(t, c, "plain"); plain.Features().ServerPoison {
		t.Fatal("a queue without a RedrivePolicy reports ServerPoison")
	}
	poison, err := q.Sibling(ctx, "orders-poison")
	if err != nil {
		t.Fatal(err)
	}
	defer poison.Close()
	if _, err := q.Put(ctx, []byte("bad"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	o := listenerOptions(time.Second)
	o.Tasks, o.MinTasks, o.MaxTasks = 1, 1, 1
	o.Poison, o.MaxDequeueCount = poison, 1
	var runs sync.Map
	l, err := listener.New(q, func(_ context.Context, m *queue.Message) error {
		runs.Store(m.DequeueCount, true)
		return errors.New("always fails")
	}, o)
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, l, time.Minute, func() bool {
		n, err := dlq.Count(ctx)
		return err == nil && n == 1
	})
	if n, err := poison.Count(ctx); err != nil || n != 0 {
		t.Fatalf("adaptq's poison queue holds %d (%v); SQS's redrive should have won", n, err)
	}
	if _, ok := runs.Load(2); !ok {
		t.Fatal("the handler did not run a second time: the listener poisoned the message itself")
	}
}
