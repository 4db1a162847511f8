package listener_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/meter"
)

// faulty makes a share of calls fail with transient errors, slows some
// down, and sometimes loses the answer of a batch delete that the backend
// did carry out. It counts every attempt that reaches it.
type faulty struct {
	driver.Queue
	mu       sync.Mutex
	rng      *rand.Rand
	failRate float64
	attempts atomic.Int64
	injected atomic.Int64
	lostAcks atomic.Int64
}

var errInjected = errors.New("injected fault: 503 server busy")

func (f *faulty) roll() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.Float64()
}

// before runs ahead of each call: latency now and then, and a failure at
// the configured rate.
func (f *faulty) before() error {
	f.attempts.Add(1)
	r := f.roll()
	if r < 0.05 {
		time.Sleep(time.Duration(r * float64(20*time.Millisecond)))
	}
	if f.roll() < f.failRate {
		f.injected.Add(1)
		return queue.Transient(errInjected, 0)
	}
	return nil
}

func (f *faulty) Get(ctx context.Context, n int, vis time.Duration) ([]*driver.Message, error) {
	if err := f.before(); err != nil {
		return nil, err
	}
	return f.Queue.Get(ctx, n, vis)
}

func (f *faulty) Delete(ctx context.Context, id, r string) error {
	if err := f.before(); err != nil {
		return err
	}
	return f.Queue.Delete(ctx, id, r)
}

func (f *faulty) DeleteBatch(ctx context.Context, rs []driver.Receipt) ([]error, error) {
	if err := f.before(); err != nil {
		return nil, err
	}
	res, err := f.Queue.DeleteBatch(ctx, rs)
	if err == nil && f.roll() < 0.05 {
		// The backend deleted them; the answer never arrived.
		f.lostAcks.Add(1)
		return nil, queue.Transient(errors.New("injected fault: connection reset after the delete"), 0)
	}
	return res, err
}

func (f *faulty) UpdateVisibility(ctx context.Context, id, r string, d time.Duration) (string, error) {
	if err := f.before(); err != nil {
		return "", err
	}
	return f.Queue.UpdateVisibility(ctx, id, r, d)
}

func (f *faulty) Count(ctx context.Context) (int, error) {
	if err := f.before(); err != nil {
		return 0, err
	}
	return f.Queue.Count(ctx)
}

// TestFaultsLoseNothing drains 20,000 messages through a backend that
// fails 20 % of calls: every message is handled, the queue ends empty, the
// listener never stops, and the meter bills every attempt.
func TestFaultsLoseNothing(t *testing.T) {
	const n = 20_000
	store := memory.NewStore()
	raw, err := store.Queue("faults")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ids := make([]string, n)
	for i := range ids {
		if ids[i], err = raw.Put(ctx, []byte(fmt.Sprint(i)), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f := &faulty{rng: rand.New(rand.NewPCG(1, 2)), failRate: 0.2}
	m := meter.New(0)
	q, err := store.Queue("faults", queue.WithObserver(m), queue.WithWrapper(func(d driver.Queue) driver.Queue { f.Queue = d; return f }))
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	h := func(ctx context.Context, msg *queue.Message) error {
		if rand.IntN(50) == 0 {
			time.Sleep(time.Millisecond) // some slow ones, so batches overlap
		}
		return rec.handle(ctx, msg)
	}
	l, err := listener.New(q, h, listener.Options{
		Tasks:               8,
		Concurrency:         8 * 48,
		VisibilityTimeout:   2 * time.Second,
		ErrorBackoffInitial: time.Millisecond,
		ErrorBackoffMax:     20 * time.Millisecond,
		Idle:                scalingIdle(50 * time.Millisecond),
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(runCtx) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		d, _ := raw.Count(ctx)
		if d == 0 && rec.distinct() == n {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the listener exited under faults: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("depth %d, %d of %d handled", d, rec.distinct(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := l.ActiveTasks(); got < 1 {
		t.Fatalf("%d tasks left", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, id := range ids {
		if rec.count(id) == 0 {
			t.Fatalf("message %s lost", id)
		}
	}
	s := m.Snapshot()
	st := l.Stats()
	t.Logf("attempts %d, injected failures %d, lost acks %d; listener: %d get errors, %d delete errors, %d duplicates",
		f.attempts.Load(), f.injected.Load(), f.lostAcks.Load(), st.GetErrors, st.DeleteErrors, st.Processed-int64(n))
	if f.injected.Load() == 0 || f.lostAcks.Load() == 0 {
		t.Fatal("no faults were injected: the test tested nothing")
	}
	if st.GetErrors == 0 || st.TransientErrors == 0 {
		t.Errorf("listener stats %+v: failed gets not counted", st)
	}
	// The meter sits above the faults: it billed every attempt, failed or not.
	if got := s.Total(); got != f.attempts.Load() {
		t.Errorf("meter billed %d calls, the backend saw %d attempts", got, f.attempts.Load())
	}
	if got := s.TotalErrors(); got != f.injected.Load()+f.lostAcks.Load() {
		t.Errorf("meter counted %d failed calls, %d were injected", got, f.injected.Load()+f.lostAcks.Load())
	}
}

// flakyItems fails the first delete of every other message with a
// transient error of its own, as Azure's per-message deletes can.
type flakyItems struct {
	driver.Queue
	mu    sync.Mutex
	tried map[string]bool
}

func (f *flakyItems) DeleteBatch(ctx context.Context, rs []driver.Receipt) ([]error, error) {
	out := make([]error, len(rs))
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, r := range rs {
		if n, _ := strconv.Atoi(r.ID); n%2 == 0 && !f.tried[r.ID] {
			f.tried[r.ID] = true
			out[i] = queue.Transient(errors.New("injected: 503 on this delete"), 0)
			continue
		}
		out[i] = f.Queue.Delete(ctx, r.ID, r.PopReceipt)
	}
	return out, nil
}

func TestTransientDeleteOfOneMessageIsRetried(t *testing.T) {
	rec := newRecorder()
	f := newFixtureWith(t, rec.handle, listener.Options{}, func(q driver.Queue) driver.Queue {
		return &flakyItems{Queue: q, tried: map[string]bool{}}
	})
	f.put(64)
	f.start()
	eventually(t, "all 64 are handled", func() bool { return f.l.Stats().Processed == 64 })
	eventually(t, "the first deletes are done", func() bool { return f.l.Stats().Deleted == 32 })
	f.clock.Advance(100 * time.Millisecond) // the retry's pause
	eventually(t, "all 64 are deleted", func() bool { return f.l.Stats().Deleted == 64 })
	if s := f.l.Stats(); s.DeleteErrors != 0 || s.Processed != 64 {
		t.Fatalf("stats %+v: every message must be deleted on a retry, none run twice", s)
	}
	if d := f.depth(); d != 0 {
		t.Fatalf("depth %d", d)
	}
}
