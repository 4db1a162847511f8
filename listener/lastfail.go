package listener

import (
	"sync"
	"sync/atomic"

	"github.com/adaptq/adaptq/queue/poison"
)

// maxRemembered bounds the failures a listener remembers: a few failing
// messages per task, enough for the messages of the batches in flight.
const maxRemembered = 1024

// lastFailures remembers the last handler error of messages that failed
// here and stayed in their queue, so that a message that comes back with a
// dequeue count above the maximum (its last run's verdict was lost: the
// poison put failed, or its lease ran out) is poisoned with the reason it
// last failed, not an unknown one. Only failure paths touch it.
type lastFailures struct {
	n  atomic.Int64 // len(m), so that forgetting costs no lock while none is remembered
	mu sync.Mutex
	m  map[string]string // msg id → error text, at most poison.MaxReason bytes
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
	if _, ok := f.m[id]; !ok && len(f.m) >= maxRemembered {
		for k := range f.m { // evict one, any one
			delete(f.m, k)
			break
		}
	}
	f.m[id] = s
	f.n.Store(int64(len(f.m)))
}

// last returns message id's last failure.
func (f *lastFailures) last(id string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.m[id]
	return s, ok
}

// forget drops message id's last failure: it left its queue, or its
// last run here succeeded.
func (f *lastFailures) forget(id string) {
	if f.n.Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, id)
	f.n.Store(int64(len(f.m)))
}
