package adaptq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/scaling"
)

// ScalingPath serves the scaling signal, GET only: how many worker
// instances the queues need, for an autoscaler such as KEDA.
const ScalingPath = "/v1/scaling"

// ScalingDepthInterval is how often the scaling signal reads the depth of
// a queue on a billed backend (Features().Billed), however often it is
// asked: a depth is a billed transaction, and anyone who reaches the admin
// address may poll the signal. 10 s is a third of KEDA's default polling
// interval, so the autoscaler sees a depth read since its last poll.
const ScalingDepthInterval = 10 * time.Second

// Scaling is the scaling signal, as GET /v1/scaling serves it: the Best
// Practices article's dynamic scaling agent across processes. Every
// instance of a worker runs every queue of its config, so the instances
// needed are the most any queue asks for.
type Scaling struct {
	// DesiredInstances is the most any queue's policy asks for: the figure
	// an autoscaler reads (KEDA's metrics-api scaler: valueLocation
	// "desired_instances").
	DesiredInstances int            `json:"desired_instances"`
	Queues           []QueueScaling `json:"queues"`
}

// QueueScaling is one queue's part of the scaling signal.
type QueueScaling struct {
	Name string `json:"name"`
	// Depth is the queue's approximate message count (one billed call),
	// in flight included.
	Depth int `json:"depth"`
	// DepthError is set when the depth could not be read; the answer is
	// then HTTP 503, so an autoscaler keeps its count (or its fallback).
	DepthError string `json:"depth_error,omitempty"`
	// DrainRate is the messages this instance deleted a second over the
	// last minute, DrainWindow the time that covers (less while the worker
	// has run less). Busy says the instance had work throughout it (it
	// deleted and made no empty get): only then is DrainRate what one
	// instance can do, and the policy uses it.
	DrainRate   float64  `json:"drain_rate"`
	DrainWindow Duration `json:"drain_window"`
	Busy        bool     `json:"busy"`
	// DesiredInstances is the policy's answer and Basis what it came from:
	// "drain_rate", "messages_per_instance" or "empty".
	DesiredInstances int           `json:"desired_instances"`
	Basis            scaling.Basis `json:"basis"`
	// The policy (queues[].instances).
	TargetDrainTime     Duration `json:"target_drain_time"`
	MessagesPerInstance int      `json:"messages_per_instance"`
	MinInstances        int      `json:"min_instances"`
	MaxInstances        int      `json:"max_instances"`
}

// errDepth: the scaling signal could not read a queue's depth.
var errDepth = errors.New("adaptq: the depth of a queue could not be read")

// Scaling reads every queue's depth (one billed Count each) and answers
// how many instances each needs, by its queues[].instances policy and the
// drain rate of the last minute. The error is set when a depth could not
// be read (that queue's DepthError says why) or the worker is not running.
func (w *Worker) Scaling(ctx context.Context) (Scaling, error) {
	w.mu.Lock()
	qs := append([]*workerQueue(nil), w.queues...)
	w.mu.Unlock()
	if len(qs) == 0 {
		return Scaling{Queues: []QueueScaling{}}, ErrNotRunning
	}
	var s Scaling
	var failed error
	for _, wq := range qs {
		minute, _ := wq.win.windows(w.clock.Now())
		p := wq.cfg.instances()
		q := QueueScaling{
			Name: wq.name, DrainRate: minute.DrainRate, DrainWindow: minute.Elapsed,
			Busy:            minute.Deleted > 0 && minute.EmptyGets == 0,
			TargetDrainTime: Duration(p.TargetDrainTime), MessagesPerInstance: p.MessagesPerInstance,
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

// serveScaling answers GET /v1/scaling: 200 with the signal, 503 with what
// is known when a depth could not be read.
func (w *Worker) serveScaling(rw http.ResponseWriter, r *http.Request) {
	s, err := w.Scaling(r.Context())
	rw.Header().Set("Content-Type", "application/json")
	if err != nil {
		rw.WriteHeader(http.StatusServiceUnavailable)
	}
	enc := json.NewEncoder(rw)
	enc.SetIndent("", "  ")
	_ = enc.Encode(s)
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
