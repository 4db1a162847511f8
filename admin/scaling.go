package admin

import (
	"encoding/json"
	"net/http"

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

// serveScaling answers GET /v1/scaling: 200 with the signal, 503 with what
// is known when a depth could not be read.
func (s *Server) serveScaling(rw http.ResponseWriter, r *http.Request) {
	sig, err := s.w.Scaling(r.Context())
	rw.Header().Set("Content-Type", "application/json")
	if err != nil {
		rw.WriteHeader(http.StatusServiceUnavailable)
	}
	enc := json.NewEncoder(rw)
	enc.SetIndent("", "  ")
	_ = enc.Encode(sig)
}
