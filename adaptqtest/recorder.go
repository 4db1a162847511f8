package adaptqtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
)

// recorder sees every handler run and every call to the kit's queues.
type recorder struct {
	clock *clock.Fake

	// running counts handler runs and calls in progress; events counts
	// their starts and ends: the kit's signs of activity.
	running atomic.Int64
	events  atomic.Uint64

	mu        sync.Mutex
	queueOf   map[string]string // message id → queue it was put to
	bodies    map[string][]byte
	runs      map[string][]Run
	gone      map[string]bool           // deleted
	poisoned  map[string]poison.Message // original id → its poison envelope
	poisonIDs map[string]bool           // ids of poison messages
	lose      int                       // deletes still to lose
}

func newRecorder(c *clock.Fake) *recorder {
	return &recorder{
		clock: c, queueOf: map[string]string{}, bodies: map[string][]byte{}, runs: map[string][]Run{},
		gone: map[string]bool{}, poisoned: map[string]poison.Message{}, poisonIDs: map[string]bool{},
	}
}

// call marks a call to a queue as running; the func it returns ends it.
func (r *recorder) call() func() {
	r.running.Add(1)
	r.events.Add(1)
	return func() {
		r.running.Add(-1)
		r.events.Add(1)
	}
}

func (r *recorder) put(queueName, id string, body []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pm, ok := isPoison(id, body); ok {
		r.poisonIDs[id] = true
		r.poisoned[pm.ID] = pm
		return
	}
	r.queueOf[id] = queueName
	r.bodies[id] = append([]byte(nil), body...)
}

func (r *recorder) deleted(id string) {
	r.mu.Lock()
	r.gone[id] = true
	r.mu.Unlock()
}

// loseDelete reports whether the delete of id is to be lost: one of the
// deletes LoseDeletes asked for, after a successful run.
func (r *recorder) loseDelete(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	runs := r.runs[id]
	if r.lose == 0 || len(runs) == 0 || runs[len(runs)-1].Err != nil {
		return false
	}
	r.lose--
	return true
}

// middleware records each run of the handler it wraps: when it started,
// the message's dequeue count, and what it returned (a panic as an error,
// then panicking on, for the listener to recover as it would).
func (r *recorder) middleware(next handler.Func) handler.Func {
	return func(ctx context.Context, m *queue.Message) (err error) {
		r.running.Add(1)
		r.events.Add(1)
		run := Run{At: r.clock.Now(), DequeueCount: m.DequeueCount}
		defer func() {
			p := recover()
			run.Err = err
			if p != nil {
				run.Err = fmt.Errorf("panic: %v", p)
			}
			r.mu.Lock()
			r.runs[m.ID] = append(r.runs[m.ID], run)
			r.mu.Unlock()
			r.running.Add(-1)
			r.events.Add(1)
			if p != nil {
				panic(p)
			}
		}()
		return next(ctx, m)
	}
}

// Run is one run of the handler on a message.
type Run struct {
	// At is when the run began, by the kit's clock. A run takes no virtual
	// time: the clock moves only between runs.
	At time.Time
	// DequeueCount is the message's dequeue count at this run.
	DequeueCount int
	// Err is what the handler returned (a panic as an error).
	Err error
}
