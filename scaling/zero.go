package scaling

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
)

// BoundedDepth defaults.
const (
	// DefaultApproximateZeroHold is how long a queue whose count is
	// approximate (Features.ExactCount unset) must read zero before the
	// scale-to-zero signal believes it: SQS's approximate counts "may not
	// achieve consistency until at least 1 minute after the producers stop
	// sending messages" (GetQueueAttributes' documentation), so one zero
	// may hide a message just put or just received.
	DefaultApproximateZeroHold = time.Minute
	// DefaultDepthReadTimeout bounds one depth read, whoever asked for it:
	// the callers waiting on it give up with their own context, the read
	// goes on for the next caller until this.
	DefaultDepthReadTimeout = 10 * time.Second
)

// DepthReading is one read of a queue's depth, as BoundedDepth keeps it.
type DepthReading struct {
	// Depth is the count read (messages visible and in flight); Err is set
	// when the read failed, and Depth is then 0.
	Depth int
	Err   error
	// At is when the read was made.
	At time.Time
	// ZeroSince is when the run of zero reads that ends with this one
	// began (the first of them); zero unless Depth is 0. A failed read
	// neither starts nor ends a run.
	ZeroSince time.Time
}

// BoundedDepthOptions configure a BoundedDepth.
type BoundedDepthOptions struct {
	// Interval is the least time between two reads (required): a caller
	// within it of the last read gets that read.
	Interval time.Duration
	// Timeout bounds one read (DefaultDepthReadTimeout if zero).
	Timeout time.Duration
	Clock   clock.Clock
}

// BoundedDepth reads a queue's depth for a signal that anyone who reaches
// it may poll (an autoscaler, a scrape, a flood): at most one read per
// Interval however often it is asked, and callers that ask while a read
// is in flight get the last read, or wait for that read when there is
// none yet or the last is older than two intervals before it (a quiet
// spell), instead of starting their own. A failed
// read counts as a read: a backend that fails is asked again an interval
// later, not at every request. It keeps when the queue started reading
// zero, for the scale-to-zero rule (Instances.DesiredOrZero).
type BoundedDepth struct {
	read func(context.Context) (int, error)
	o    BoundedDepthOptions

	mu         sync.Mutex
	last       DepthReading
	have       bool
	inflight   chan struct{} // closed when the read in flight ends; nil when none is
	inflightAt time.Time     // when the read in flight began
}

// NewBoundedDepth bounds the reads of read, one backend call each.
func NewBoundedDepth(read func(context.Context) (int, error), o BoundedDepthOptions) *BoundedDepth {
	if o.Timeout <= 0 {
		o.Timeout = DefaultDepthReadTimeout
	}
	if o.Clock == nil {
		o.Clock = clock.Real
	}
	return &BoundedDepth{read: read, o: o}
}

// Depth is the newest reading, read first if the last is an interval old
// (or there is none) and no read is in flight; while one is, the last
// reading if it was made at most two intervals before that read began
// (so it is at most 2·Interval+Timeout old), else (before the first, or
// after a quiet spell) that read's. A caller whose ctx ends
// while it waits gets ctx's error; the read it waited for goes on for the
// others, within Timeout.
func (b *BoundedDepth) Depth(ctx context.Context) (DepthReading, error) {
	for {
		b.mu.Lock()
		now := b.o.Clock.Now()
		if age := now.Sub(b.last.At); b.have && age >= 0 && age < b.o.Interval {
			r := b.last
			b.mu.Unlock()
			return r, nil
		}
		if wait := b.inflight; wait != nil {
			if b.have && b.inflightAt.Sub(b.last.At) < 2*b.o.Interval {
				// A read is on its way and the last one was made at
				// most two intervals before it began (reads come
				// continuously): it answers at once, so that a slow
				// backend holds one request (and its connection), not
				// every one that comes meanwhile. After a quiet spell
				// the last reading is as old as the spell: the callers
				// wait for the fresh read, as before the first.
				r := b.last
				b.mu.Unlock()
				return r, nil
			}
			b.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return DepthReading{}, ctx.Err()
			}
		}
		done := make(chan struct{})
		b.inflight, b.inflightAt = done, now
		b.mu.Unlock()
		return b.readNow(ctx, now, done), nil
	}
}

// readNow makes the read the others wait on. It runs under a context of
// its own, not the caller's: a caller that goes away (a client that hangs
// up) must not turn the shared read into a failure, or every waiter would
// start another.
//
// A read that panics (net/http recovers a handler's panic and serves on)
// is recorded as a failed read before the panic goes on to the caller:
// otherwise it would stay in flight for ever, and every caller after it
// would wait for it, or get the reading before it, until the process
// ends.
func (b *BoundedDepth) readNow(ctx context.Context, now time.Time, done chan struct{}) DepthReading {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.o.Timeout)
	defer cancel()
	ended := false
	defer func() {
		if !ended {
			b.record(0, errReadPanicked, now, done)
		}
	}()
	n, err := b.read(rctx)
	ended = true
	return b.record(n, err, now, done)
}

// errReadPanicked is the reading of a read that panicked.
var errReadPanicked = errors.New("scaling: the depth read panicked")

// record keeps the reading of the read begun at now and ends it (done).
func (b *BoundedDepth) record(n int, err error, now time.Time, done chan struct{}) DepthReading {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := DepthReading{Depth: n, Err: err, At: now}
	switch {
	case err != nil:
		r.Depth = 0
		if b.have {
			r.ZeroSince = b.last.ZeroSince
		}
	case n == 0:
		r.ZeroSince = now
		if b.have && !b.last.ZeroSince.IsZero() {
			r.ZeroSince = b.last.ZeroSince
		}
	}
	b.last, b.have = r, true
	b.inflight = nil
	close(done)
	return r
}

// DesiredOrZero is the scale-to-zero answer for a queue read by r, which
// no worker serves: 0 (BasisEmpty) once the queue has read zero for hold
// (0 where the count is exact: a zero is then nothing visible and nothing
// in flight), Min but at least one while a zero is younger than hold
// (BasisEmptyUnconfirmed), and for a backlog what Desired answers without
// a drain rate (a scaler measures none), at least one. Min is the floor
// while the queue has work; a floor while it has none is the autoscaler's
// own (KEDA's minReplicaCount).
func (p Instances) DesiredOrZero(r DepthReading, hold time.Duration) (int, Basis) {
	if r.Depth > 0 {
		n, b := p.Desired(r.Depth, 0)
		return max(n, 1), b
	}
	if !r.ZeroSince.IsZero() && r.At.Sub(r.ZeroSince) >= hold {
		return 0, BasisEmpty
	}
	return max(Clamp(1, p.Min, p.Max), 1), BasisEmptyUnconfirmed
}
