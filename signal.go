package adaptq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/scaling"
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
			q.DepthError = queue.RedactText(err.Error())
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

// scalingDepth reads the queue's depth for the scaling signal: at each
// call on a free backend, at most once per ScalingDepthInterval on a
// billed one, concurrent signals sharing the read in flight
// (scaling.BoundedDepth, as `adaptq scaler` reads it).
func (wq *workerQueue) scalingDepth(ctx context.Context, c clock.Clock) (int, error) {
	if !wq.q.Features().Billed {
		return wq.l.Depth(ctx)
	}
	wq.sigOnce.Do(func() {
		wq.sig = scaling.NewBoundedDepth(wq.l.Depth, scaling.BoundedDepthOptions{Interval: ScalingDepthInterval, Clock: c})
	})
	r, err := wq.sig.Depth(ctx)
	if err != nil {
		return 0, err
	}
	return r.Depth, r.Err
}
