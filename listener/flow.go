package listener

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	"golang.org/x/sync/semaphore"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/scaling"
)

// Flow control: a rate limit on the messages a listener starts, and a
// concurrency that adapts to the downstream (see Options.RateLimit and
// Options.Adaptive). Both act before a get, never after: a task asks for
// no more messages than it may start at once, so a fetched message never
// waits for a token or a slot while its visibility timeout runs, and what
// the listener may not start yet stays visible for the queue's other
// workers.

// RateLimit bounds how many messages a second a listener hands to its
// handler. The zero value is no limit.
type RateLimit struct {
	// PerSecond is the steady rate; 0: no limit.
	PerSecond float64
	// Burst is how many may start at once after a quiet spell, and the most
	// one get asks for (0: scaling.DefaultRateBurst, a second's worth, at
	// most the batch size). A burst below the batch size makes gets
	// smaller, and so more of them: 1 starts messages evenly spaced, at
	// the price of one get per message.
	Burst int
}

// FlowState is what the listener's flow control is doing.
type FlowState struct {
	// Adaptive says the concurrency adapts (Options.Adaptive); Limit is
	// the concurrency allowed now (the fixed Concurrency otherwise), Min
	// and Max its bounds.
	Adaptive        bool
	Limit, Min, Max int
	// Cuts counts the times an overload signal lowered the limit;
	// Overloads the handler calls that failed with one
	// (handler.IsOverloaded), counted only while adaptive.
	Cuts, Overloads int64
	// RatePerSecond and RateBurst are the rate limit (0: none); RateWaits
	// counts the times a task waited for it before a get.
	RatePerSecond float64
	RateBurst     int
	RateWaits     int64
}

// Flow reads the flow control's state without calling the queue.
func (l *Listener) Flow() FlowState {
	s := FlowState{Limit: l.o.Concurrency, Min: l.o.Concurrency, Max: l.o.Concurrency,
		Overloads: l.sem.overloads.Load(), RateWaits: l.sem.rateWaits.Load()}
	if a := l.sem.aimd; a != nil {
		o := a.Options()
		s.Adaptive, s.Limit, s.Min, s.Max = true, a.Limit(), o.Min, o.Max
		s.Cuts, _ = a.Cuts()
	}
	if g := l.sem.gate; g != nil {
		s.RatePerSecond, s.RateBurst = g.PerSecond(), g.Burst()
	}
	return s
}

// validateFlow names a bad rate limit or adaptive bound.
func (o Options) validateFlow() error {
	r := o.RateLimit
	switch {
	case r.PerSecond < 0 || math.IsNaN(r.PerSecond) || math.IsInf(r.PerSecond, 0):
		return fmt.Errorf("listener: rate_limit.per_second: %v is not a number ≥ 0", r.PerSecond)
	case r.Burst < 0:
		return fmt.Errorf("listener: rate_limit.burst: %d is negative", r.Burst)
	case r.Burst > 0 && r.PerSecond == 0:
		return fmt.Errorf("listener: rate_limit.burst: %d is set without rate_limit.per_second", r.Burst)
	}
	if o.Adaptive != nil {
		a := *o.Adaptive
		if a.Max == 0 {
			a.Max = o.Concurrency // as newSlots does, not scaling's default
		}
		if err := a.Validate(); err != nil {
			return fmt.Errorf("listener: adaptive concurrency: %w", err)
		}
	}
	return nil
}

// newSlots makes the listener's gate: its handler slots (Concurrency, or
// the adaptive limit's Max), the adaptive limit and the rate limit.
func newSlots(o *Options) (*slots, error) {
	s := &slots{changed: make(chan struct{})}
	if o.Adaptive != nil {
		a := *o.Adaptive
		if a.Max == 0 {
			a.Max = o.Concurrency
		}
		aimd, err := scaling.NewAIMD(a)
		if err != nil {
			return nil, fmt.Errorf("listener: adaptive concurrency: %w", err)
		}
		s.aimd = aimd
		o.Concurrency = aimd.Options().Max
		o.Adaptive = &a
	}
	s.sem = semaphore.NewWeighted(int64(o.Concurrency))
	if r := o.RateLimit; r.PerSecond > 0 {
		burst := r.Burst
		if burst == 0 {
			burst = scaling.DefaultRateBurst(r.PerSecond, o.BatchSize)
		}
		g, err := scaling.NewRateGate(r.PerSecond, burst)
		if err != nil {
			return nil, fmt.Errorf("listener: rate_limit: %w", err)
		}
		s.gate = g
		o.RateLimit.Burst = burst
	}
	return s, nil
}

// slots are a listener's handler slots: the Concurrency bound (a
// semaphore, taken a batch at a time before each get), and on top of it
// the adaptive limit, if any, and the rate limit, if any.
type slots struct {
	sem  *semaphore.Weighted
	aimd *scaling.AIMD
	gate *scaling.RateGate

	mu      sync.Mutex
	used    int           // slots taken under the adaptive limit
	changed chan struct{} // closed and replaced when used falls or the limit changes

	overloads, rateWaits atomic.Int64
}

// Release frees n slots.
func (s *slots) Release(n int64) {
	s.sem.Release(n)
	if s.aimd != nil {
		s.mu.Lock()
		s.used -= int(n)
		s.signalLocked()
		s.mu.Unlock()
	}
}

func (s *slots) signalLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// admit takes the slots, and the rate limit's tokens, of the next get:
// how many messages it may ask for. With a fixed concurrency that is a
// whole batch's slots (min(BatchSize, Concurrency)), as before flow
// control; under an adaptive limit L it waits until max(1, min(L,
// batch)/2) are free (the new-batch threshold's rule: two half-full
// batches may fill the limit) and takes what is free, at most a batch; under a rate limit it then waits, parked on the
// clock, until the tokens of min(that, burst) messages are there, and asks
// for no more than the tokens it has. The caller must call admitted after
// the get.
func (l *Listener) admit(ctx context.Context) (int, sleepReason) {
	s := l.sem
	batch := l.getSize()
	for {
		held, ok := s.take(ctx, batch)
		if !ok {
			return 0, sleepCancelled
		}
		if s.gate == nil {
			return held, sleptFull
		}
		n, wait := s.gate.Admit(l.o.Clock.Now(), held, held)
		if n > 0 {
			if n < held {
				s.Release(int64(held - n))
			}
			return n, sleptFull
		}
		s.Release(int64(held))
		s.rateWaits.Add(1)
		switch r := l.sleep(ctx, wait, nil); r {
		case sleepCancelled, sleepStop:
			return 0, r
		}
		if ctx.Err() != nil {
			return 0, sleepCancelled
		}
	}
}

// admitted ends a get that admit let ask for n messages, which returned
// got: their tokens are taken (the rest of the promise is dropped).
func (l *Listener) admitted(n, got int) {
	if g := l.sem.gate; g != nil {
		g.Commit(l.o.Clock.Now(), n, got)
	}
}

// take waits for the slots of a get of at most batch messages and takes
// them.
func (s *slots) take(ctx context.Context, batch int) (int, bool) {
	if s.aimd == nil {
		if err := s.sem.Acquire(ctx, int64(batch)); err != nil {
			return 0, false
		}
		return batch, true
	}
	for {
		s.mu.Lock()
		limit := s.aimd.Limit()
		want := max(1, min(limit, batch)/2)
		if free := limit - s.used; free >= want {
			n := min(free, batch)
			s.used += n
			s.mu.Unlock()
			if err := s.sem.Acquire(ctx, int64(n)); err != nil {
				s.mu.Lock()
				s.used -= n
				s.signalLocked()
				s.mu.Unlock()
				return 0, false
			}
			return n, true
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, false
		}
	}
}

// observeFlow is the middleware through which an adaptive listener learns
// from each handler call: its time (on the listener's clock) and whether
// it succeeded, failed for overload (handler.IsOverloaded), or otherwise.
func (l *Listener) observeFlow(next handler.Func) handler.Func {
	s := l.sem
	return func(ctx context.Context, m *queue.Message) error {
		start := l.o.Clock.Now()
		err := next(ctx, m)
		end := l.o.Clock.Now()
		oc := scaling.Succeeded
		switch {
		case err == nil:
		case overloaded(err):
			oc = scaling.Overloaded
			s.overloads.Add(1)
		default:
			oc = scaling.Failed
		}
		before := s.aimd.Limit()
		if s.aimd.Observe(start, end.Sub(start), oc, int(l.inFlight.Load()), end) {
			s.mu.Lock()
			s.signalLocked()
			s.mu.Unlock()
			if after := s.aimd.Limit(); after < before {
				l.log.Debug("listener: overload: concurrency cut", zap.Int("from", before), zap.Int("to", after), zap.Error(err))
			}
		}
		return err
	}
}

// overloaded reports whether err is an overload signal that is not also a
// permanent failure.
func overloaded(err error) bool {
	return handler.IsOverloaded(err) && !handler.IsPermanent(err)
}

// overloadFailed settles, under an adaptive limit, a message whose
// handler failed for overload (handler.IsOverloaded): the downstream's
// state, not the message's, so the delivery does not count towards its
// poisoning here (as a worker fault's does not). It is handed back at
// once when shutting down, else hidden for its retry delay (a server's
// Retry-After) as any failure, and poisoned only if it could not then run
// again before it expires (poison.RuleExpiring). It reports whether it
// settled the message.
func (b *batch) overloadFailed(i int, err error) bool {
	l := b.l
	if l.sem.aimd == nil || !overloaded(err) {
		return false
	}
	m := b.msgs[i]
	l.failures.excuse(m.ID)
	l.rememberFailure(m.ID, err)
	if l.draining.Load() {
		l.release(m.ID, b.newestReceipt(i))
		return true
	}
	b.retryLater(i, err)
	return true
}
