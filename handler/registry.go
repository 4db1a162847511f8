package handler

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/adaptq/adaptq/queue"
)

// ErrDuplicate is returned by Registry.Handle for a queue name that already
// has a handler.
var ErrDuplicate = errors.New("handler: queue already has a handler")

// Registry maps queue names to their handlers. The zero value is an empty
// registry ready to use; it is safe for concurrent use.
type Registry struct {
	mu sync.RWMutex
	h  map[string]Func
}

// Handle registers h as the handler of the queue queueName. The name must
// pass queue.ValidateName (the error then wraps queue.ErrInvalidName), h must
// not be nil, and the queue must not have a handler yet (ErrDuplicate). The
// errors name the queue.
func (r *Registry) Handle(queueName string, h Func) error {
	if err := queue.ValidateName(queueName); err != nil {
		return fmt.Errorf("handler: register: %w", err)
	}
	if h == nil {
		return fmt.Errorf("handler: register %q: nil handler func", queueName)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.h[queueName]; dup {
		return fmt.Errorf("%w: %q", ErrDuplicate, queueName)
	}
	if r.h == nil {
		r.h = make(map[string]Func)
	}
	r.h[queueName] = h
	return nil
}

// MustHandle is Handle that panics on error, for registrations in init or
// main where a mistake is a programming error.
func (r *Registry) MustHandle(queueName string, h Func) {
	if err := r.Handle(queueName, h); err != nil {
		panic(err)
	}
}

// Lookup returns the handler of the queue queueName, if one is registered.
func (r *Registry) Lookup(queueName string) (Func, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	h, ok := r.h[queueName]
	return h, ok
}

// Names returns the registered queue names in sorted order.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.h))
}
