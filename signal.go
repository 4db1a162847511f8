package adaptq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/internal/clock"
)

// ScalingDepthInterval is how often the scaling signal reads the depth of
// a queue on a billed backend (Features().Billed), however often it is
// asked: a depth is a billed transaction, and anyone who reaches the admin
// address may poll the signal. 10 s is a third of KEDA's default polling
// interval, so the autoscaler sees a depth read since its last poll.
const ScalingDepthInterval = 10 * time.Second

// errDepth: the scaling signal could not read a queue's depth.
var errDepth = errors.New("adaptq: the depth of a queue could not be read")

// Scaling is the scaling signal GET /v1/scaling serves (package admin):
// it reads every queue's depth (one billed Count each) and answers
// how many instances each needs, by its queues[].instances policy and the
// drain rate of the last minute. The error is set when a depth could not
// be read (that queue's DepthError says why) or the worker is not running.
func (w *Worker) Scaling(ctx context.Context) (admin.Scaling, error) {
	w.mu.Lock()
	qs := append([]*workerQueue(nil), w.queues...)
	w.mu.Unlock()
	if len(qs) == 0 {
		return admin.Scaling{Queues: []admin.QueueScaling{}}, ErrNotRunning
	}
	var s admin.Scaling
	var failed error
	for _, wq := range qs {
		minute, _ := wq.win.windows(w.clock.Now())
		p := wq.cfg.instances()
		q := admin.QueueScaling{
			Name: wq.name, DrainRate: minute.DrainRate, DrainWindow: minute.Elapsed,
			Busy:            minute.Deleted > 0 && minute.EmptyGets == 0,
			TargetDrainTime: admin.Duration(p.TargetDrainTime), MessagesPerInstance: p.MessagesPerInstance,
			MinInstances: p.Min, MaxInstances: p.Max,
		}
		depth, err := wq.scalingDepth(ctx, w.clock)
		if err != nil {
			q.DepthError = err.Error()
			failed = fmt.Errorf("%w: %q: %w", errDepth, wq.name, err)
		} else {
			rate := 0.0
			if q.Busy {
				rate = q.DrainRate
			}
			q.Depth = depth
			q.DesiredInstances, q.Basis = p.Desired(depth, rate)
			s.DesiredInstances = max(s.DesiredInstances, q.DesiredInstances)
		}
		s.Queues = append(s.Queues, q)
	}
	return s, failed
}

// signalDepth is the depth the scaling signal last read of a queue on a
// billed backend, and when.
type signalDepth struct {
	mu    sync.Mutex
	read  bool
	at    time.Time
	depth int
	err   error
}

// scalingDepth reads the queue's depth for the scaling signal: at each
// call on a free backend, at most once per ScalingDepthInterval on a
// billed one (concurrent signals wait for one read).
func (wq *workerQueue) scalingDepth(ctx context.Context, c clock.Clock) (int, error) {
	if !wq.q.Features().Billed {
		return wq.l.Depth(ctx)
	}
	d := &wq.sig
	d.mu.Lock()
	defer d.mu.Unlock()
	now := c.Now()
	if age := now.Sub(d.at); d.read && age >= 0 && age < ScalingDepthInterval {
		return d.depth, d.err
	}
	n, err := wq.l.Depth(ctx)
	if ctx.Err() == nil {
		// A read cut short by its caller says nothing of the queue.
		d.read, d.at, d.depth, d.err = true, now, n, err
	}
	return n, err
}
