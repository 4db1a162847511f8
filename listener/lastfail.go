package listener

import (
	"sync"
	"sync/atomic"

	"github.com/adaptq/adaptq/queue/poison"
)

// maxRemembered bounds the failures a listener remembers: a few failing
// messages per task, enough for the messages of the batches in flight.
const maxRemembered = 1024

// lastFailures remembers, for messages that failed here and stayed in
// their queue, the last handler error, so that a message that comes back
// with a dequeue count above the maximum (its last run's verdict was lost:
// the poison put failed, or its lease ran out) is poisoned with the reason
// it last failed, not an unknown one; and how many of its deliveries failed
// for want of the worker's own resources (handler.IsWorkerFault), which do
// not count towards its poisoning here. Only failure paths touch it.
type lastFailures struct {
	n  atomic.Int64 // len(m), so that forgetting costs no lock while none is remembered
	mu sync.Mutex
	m  map[string]failure
}

// failure is what lastFailures keeps of one message.
type failure struct {
	reason  string // the last error's text, at most poison.MaxReason bytes
	excused int    // deliveries that failed for the worker's lack of resources
}

// remember records err as message id's last failure.
func (f *lastFailures) remember(id string, err error) {
	s := err.Error()
	if len(s) > poison.MaxReason {
		s = s[:poison.MaxReason]
	}
	f.update(id, func(e *failure) { e.reason = s })
}

// excuse records a delivery of message id that failed for the worker's
// lack of resources.
func (f *lastFailures) excuse(id string) {
	f.update(id, func(e *failure) { e.excused++ })
}

func (f *lastFailures) update(id string, change func(*failure)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = make(map[string]failure)
	}
	e, ok := f.m[id]
	if !ok && len(f.m) >= maxRemembered {
		for k := range f.m { // evict one, any one
			delete(f.m, k)
			break
		}
	}
	change(&e)
	f.m[id] = e
	f.n.Store(int64(len(f.m)))
}

// last returns message id's last failure.
func (f *lastFailures) last(id string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.m[id]
	return e.reason, ok && e.reason != ""
}

// excused is how many deliveries of message id failed here for the
// worker's lack of resources.
func (f *lastFailures) excused(id string) int {
	if f.n.Load() == 0 {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[id].excused
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
