package admin

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/scaling"
)

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

// ScalingSource is what serves the scaling signal: a worker (Worker), or
// a scaler that runs no handler (StartScaler).
type ScalingSource interface {
	// Scaling is the signal, GET ScalingPath; an error (a depth that could
	// not be read, ErrNotRunning) makes the answer a 503.
	Scaling(ctx context.Context) (Scaling, error)
	// Readiness says whether the source is ready and, per queue, why or
	// why not: GET ReadyPath. It must make no backend call (the probes
	// are open without the token).
	Readiness() (ready bool, lines []string)
}

// serveScaling answers GET /v1/scaling: 200 with the signal, 503 with what
// is known when a depth could not be read.
func serveScaling(src ScalingSource) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		sig, err := src.Scaling(r.Context())
		for i := range sig.Queues {
			// A depth error may quote a backend's URL or a signed request:
			// its secrets are hidden whatever the source.
			sig.Queues[i].DepthError = queue.RedactText(sig.Queues[i].DepthError)
		}
		rw.Header().Set("Content-Type", "application/json")
		rw.Header().Set("Cache-Control", "no-store")
		if err != nil {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
		enc := json.NewEncoder(rw)
		enc.SetIndent("", "  ")
		_ = enc.Encode(sig)
	}
}

// StartScaler listens on o.Address and serves src's scaling signal
// (ScalingPath) and the probes, nothing else, until Stop: the endpoint of
// `adaptq scaler`, which answers an autoscaler while no worker runs. It
// has the admin endpoint's guards, the same code: the token (and its
// throttle of wrong tokens), the Host check without one, the cross-site
// refusal, and the bounds on connections, timeouts and bodies.
func StartScaler(src ScalingSource, o Options) (*Server, error) {
	s, ln, err := listen(o)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	s.probeRoutes(mux, src)
	mux.Handle("GET "+ScalingPath, serveScaling(src))
	s.serve(mux, ln, o)
	return s, nil
}
