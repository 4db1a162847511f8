package listener

import (
	"sync"
	"sync/atomic"

	"github.com/adaptq/adaptq/queue/poison"
)

// maxRemembered bounds the failures a listener remembers: a few failing
// messages per task, enough for the messages of the batches in flight.
const maxRemembered = 1024

// maxExcused bounds the messages whose excused deliveries a listener
// remembers. An excuse is what stands between a message and its
// poisoning, and under an adaptive limit a downstream's outage excuses
// every message of the backlog it cycles through, far more than the
// batches in flight: a bound of maxRemembered forgot the excuses of
// messages still hidden for their retry, which came back over the
// maximum dequeue count and were poisoned for overload alone. A count
// under a message id costs about a hundred bytes, so 65,536 of them some
// 6 MB; beyond them, the excuse of some message is forgotten.
const maxExcused = 1 << 16

// lastFailures remembers, for messages that failed here and stayed in
// their queue, the last handler error, so that a message that comes back
// with a dequeue count above the maximum (its last run's verdict was lost:
// the poison put failed, or its lease ran out) is poisoned with the reason
// it last failed, not an unknown one; and how many of its deliveries failed
// for want of the worker's own resources (handler.IsWorkerFault) or for
// an overloaded downstream under an adaptive limit, which do not count
// towards its poisoning here. Only failure paths touch it.
type lastFailures struct {
	n  atomic.Int64 // len(m) + len(ex), so that forgetting costs no lock while none is remembered
	mu sync.Mutex
	m  map[string]string // message id → the last error's text, at most poison.MaxReason bytes
	ex map[string]int    // message id → its excused deliveries
}

// remember records err as message id's last failure.
func (f *lastFailures) remember(id string, err error) {
	s := err.Error()
	if len(s) > poison.MaxReason {
		s = s[:poison.MaxReason]
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = make(map[string]string)
	}
	if _, ok := f.m[id]; !ok {
		evictOne(f.m, maxRemembered)
	}
	f.m[id] = s
	f.count()
}

// excuse records a delivery of message id that failed for the worker's
// lack of resources, or for an overloaded downstream.
func (f *lastFailures) excuse(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ex == nil {
		f.ex = make(map[string]int)
	}
	if _, ok := f.ex[id]; !ok {
		evictOne(f.ex, maxExcused)
	}
	f.ex[id]++
	f.count()
}

// evictOne makes room for one more entry in m, bounded by most: it
// evicts one, any one, when m is full.
func evictOne[V any](m map[string]V, most int) {
	if len(m) < most {
		return
	}
	for k := range m {
		delete(m, k)
		return
	}
}

// count stores the number of entries. f.mu is held.
func (f *lastFailures) count() { f.n.Store(int64(len(f.m) + len(f.ex))) }

// last returns message id's last failure.
func (f *lastFailures) last(id string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.m[id]
	return r, ok && r != ""
}

// excused is how many deliveries of message id failed here for the
// worker's lack of resources or an overloaded downstream.
func (f *lastFailures) excused(id string) int {
	if f.n.Load() == 0 {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ex[id]
}

// forget drops message id's last failure and excuses: it left its queue,
// or its last run here succeeded.
func (f *lastFailures) forget(id string) {
	if f.n.Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, id)
	delete(f.ex, id)
	f.count()
}

// remembered is how many messages' failures or excuses are remembered.
func (f *lastFailures) remembered() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.m)
	for id := range f.ex {
		if _, ok := f.m[id]; !ok {
			n++
		}
	}
	return n
}
