package listener_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// The queue wrappers of the issue-11 tests live in this one file: they are
// the listener's view of a queue with faults and latency injected.

// heldGets counts gets on their way and holds each until release is
// closed; the get then reaches the backend.
type heldGets struct {
	driver.Queue
	inside  atomic.Int32
	release chan struct{}
}

func (h *heldGets) Get(ctx context.Context, n int, vis time.Duration) ([]*driver.Message, error) {
	h.inside.Add(1)
	<-h.release
	return h.Queue.Get(ctx, n, vis)
}

// heldDeletes signals each delete on entered and holds it until release
// is closed: a delete with a long latency.
type heldDeletes struct {
	driver.Queue
	entered chan struct{}
	release chan struct{}
}

func (h *heldDeletes) Delete(ctx context.Context, id, receipt string) error {
	h.entered <- struct{}{}
	<-h.release
	return h.Queue.Delete(ctx, id, receipt)
}

// tortureQueue injects transient faults and latency in front of a memory
// queue and keeps the books the torture test checks: which generation
// (dequeue count) each receipt belongs to, the newest receipt of each
// message, releases, successful deletes, and calls that came too late.
// It says it has no batch delete, so a batch delete reaches it one Delete
// at a time and every delete is accounted for.
type tortureQueue struct {
	driver.Queue
	faultRate  float64
	latencyMax time.Duration
	// busy is the Features().BusyTasks it reports (a default pool then
	// grows while gets come back full), set before the listener is made.
	busy int

	rngMu sync.Mutex
	rng   *rand.Rand

	mu         sync.Mutex
	gen        map[string]int          // id → newest generation got
	receiptGen map[string]int          // receipt → its generation
	newest     map[string]string       // id → newest receipt
	released   map[string]map[int]bool // id → generations released (visibility 0)
	deleted    map[string]int          // id → successful deletes
	late       map[string]int          // id → calls refused because a newer generation took over
	faulted    map[string]int          // id → deletes failed by injection
	expired    map[string]map[int]bool // id → generations whose lease the thief ended early
	stolen     int                     // messages the thief got
	violations []string
}

func newTortureQueue(q driver.Queue, seed uint64, faultRate float64, latencyMax time.Duration) *tortureQueue {
	return &tortureQueue{
		Queue: q, faultRate: faultRate, latencyMax: latencyMax,
		rng:        rand.New(rand.NewPCG(seed, 0x70)),
		gen:        map[string]int{},
		receiptGen: map[string]int{},
		newest:     map[string]string{},
		released:   map[string]map[int]bool{},
		deleted:    map[string]int{},
		late:       map[string]int{},
		faulted:    map[string]int{},
		expired:    map[string]map[int]bool{},
	}
}

var errTortureFault = errors.New("injected fault: 503 server busy")

// Features: the driver's, without batch delete, with busy's BusyTasks.
func (q *tortureQueue) Features() driver.Features {
	f := q.Queue.Features()
	f.BatchDelete = false
	f.BusyTasks = q.busy
	return f
}

// before sleeps a random latency now and then and fails at the fault rate.
func (q *tortureQueue) before() error {
	q.rngMu.Lock()
	r, slow, fail := q.rng.Float64(), q.rng.Float64(), q.rng.Float64()
	q.rngMu.Unlock()
	if slow < 0.2 && q.latencyMax > 0 {
		time.Sleep(time.Duration(r * float64(q.latencyMax)))
	}
	if fail < q.faultRate {
		return queue.Transient(errTortureFault, 0)
	}
	return nil
}

func (q *tortureQueue) Get(ctx context.Context, n int, vis time.Duration) ([]*driver.Message, error) {
	if err := q.before(); err != nil {
		return nil, err
	}
	ms, err := q.Queue.Get(ctx, n, vis)
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range ms {
		q.gen[m.ID] = m.DequeueCount
		q.receiptGen[m.PopReceipt] = m.DequeueCount
		q.newest[m.ID] = m.PopReceipt
	}
	return ms, err
}

// refused classifies a call refused as stale or gone: fine if a newer
// generation took the message over (its lease really expired) or it was
// deleted already; a violation if the caller used an old receipt of the
// generation it still holds (its own renewal replaced it).
func (q *tortureQueue) refused(op, id, receipt string, err error) {
	if !errors.Is(err, queue.ErrReceiptMismatch) && !errors.Is(err, queue.ErrNotFound) {
		return
	}
	g := q.receiptGen[receipt]
	switch {
	case g < q.gen[id], q.expired[id][g]:
		q.late[id]++
	case q.deleted[id] > 0:
	case receipt != q.newest[id]:
		q.violations = append(q.violations, fmt.Sprintf("%s of %s with a receipt its own renewal had replaced (generation %d): %v", op, id, g, err))
	}
}

func (q *tortureQueue) Delete(ctx context.Context, id, receipt string) error {
	if err := q.before(); err != nil {
		q.mu.Lock()
		q.faulted[id]++
		q.mu.Unlock()
		return err
	}
	err := q.Queue.Delete(ctx, id, receipt)
	q.mu.Lock()
	defer q.mu.Unlock()
	if err == nil {
		q.deleted[id]++
	}
	q.refused("delete", id, receipt, err)
	return err
}

func (q *tortureQueue) UpdateVisibility(ctx context.Context, id, receipt string, d time.Duration) (string, error) {
	if err := q.before(); err != nil {
		return "", err
	}
	nr, err := q.Queue.UpdateVisibility(ctx, id, receipt, d)
	q.mu.Lock()
	defer q.mu.Unlock()
	if err == nil {
		g := q.receiptGen[receipt]
		q.receiptGen[nr] = g
		if g == q.gen[id] {
			q.newest[id] = nr
		}
		if d == 0 {
			if q.released[id] == nil {
				q.released[id] = map[int]bool{}
			}
			q.released[id][g] = true
		}
	}
	q.refused("update visibility", id, receipt, err)
	return nr, err
}

// wasReleased reports whether generation g of id was released.
func (q *tortureQueue) wasReleased(id string, g int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.released[id][g]
}

// steal is a competing consumer: now and then it ends the lease of a
// message the listener holds (as a lease does that runs out during a
// long pause), and then it gets up to n messages with a short visibility
// and leaves them to reappear. The listener then finds leases really lost:
// its renewals and deletes of those generations are refused as stale.
// It picks the lease to end among held, the ids of messages whose handler
// runs.
func (q *tortureQueue) steal(ctx context.Context, rng *rand.Rand, n int, vis time.Duration, held []string) {
	if len(held) > 0 {
		q.mu.Lock()
		id := held[rng.IntN(len(held))]
		receipt := q.newest[id]
		if q.deleted[id] > 0 {
			id = ""
		}
		q.mu.Unlock()
		if id != "" {
			// Marked before the call, so that a refusal the listener meets
			// meanwhile is classified as late.
			q.mu.Lock()
			g := q.receiptGen[receipt]
			if q.expired[id] == nil {
				q.expired[id] = map[int]bool{}
			}
			q.expired[id][g] = true
			q.mu.Unlock()
			nr, err := q.Queue.UpdateVisibility(ctx, id, receipt, 0)
			q.mu.Lock()
			if err == nil {
				q.receiptGen[nr] = g
				if g == q.gen[id] {
					q.newest[id] = nr
				}
			} else {
				delete(q.expired[id], g) // the call changed nothing
			}
			q.mu.Unlock()
		}
	}
	ms, err := q.Queue.Get(ctx, n, vis)
	if err != nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range ms {
		q.gen[m.ID] = m.DequeueCount
		q.receiptGen[m.PopReceipt] = m.DequeueCount
		q.newest[m.ID] = m.PopReceipt
		q.stolen++
	}
}
