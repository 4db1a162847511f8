package adaptq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/scaling"
)

// ScalerDepthIntervalFree is how often the scaler reads the depth of a
// queue whose calls are free (SQLite, PostgreSQL, Redis), however often
// it is asked: once a second keeps a flood of requests from becoming a
// flood of queries, and is 30 times fresher than KEDA's default polling
// interval. A billed queue's depth is read at most once per
// ScalingDepthInterval, as the worker's signal reads it.
const ScalerDepthIntervalFree = time.Second

// Scaler serves the scaling signal of a config's queues without running
// their handlers: `adaptq scaler`. No worker need be running for it to
// answer, so an autoscaler can scale the workers to zero and back: it
// answers 0 instances for a queue with nothing visible and nothing in
// flight (a queue's count includes its hidden messages on every backend,
// so a zero means no handler holds one), once the zero has held
// scaling.DefaultApproximateZeroHold where the count is approximate
// (Features().ExactCount unset: SQS, Azure, PostgreSQL), and one instance
// per queues[].instances.messages_per_instance waiting otherwise (it
// measures no drain rate: it drains nothing).
//
// It serves on admin.address, with admin.token, the endpoint's own guards
// (admin.StartScaler), only GET /v1/scaling and the probes. Each queue's
// depth is read when asked, at most once per ScalingDepthInterval where
// calls are billed and ScalerDepthIntervalFree where they are free,
// whatever the request rate; requests that arrive while a read is in
// flight get the last reading, or wait for that read before the first
// and after a quiet spell, when the last is old (scaling.BoundedDepth).
type Scaler struct {
	cfg       Config
	log       *zap.Logger
	clock     clock.Clock
	queueOpts []queue.Option
	adminOpts func(*admin.Options)

	mu      sync.Mutex
	started bool
	queues  []*scalerQueue
	addr    string
	ready   chan struct{}
	// runCtx is Run's context: every depth read ends when it does.
	// readsEnded refuses new reads once Run is stopping; reads counts
	// those in flight, which Run waits for before it closes the queues.
	runCtx     context.Context
	readsEnded bool
	reads      sync.WaitGroup
}

// scalerQueue is one configured queue as the scaler reads it.
type scalerQueue struct {
	name   string
	policy scaling.Instances
	q      *queue.Queue
	meter  *meter.Meter
	depth  *scaling.BoundedDepth
	// hold is how long a zero must last before the answer is 0: none
	// where the count is exact.
	hold time.Duration
}

// NewScaler returns a scaler for cfg's queues. Their handlers are not
// needed, nor looked up. The options are the worker's (WithLogger).
func NewScaler(cfg Config, opts ...Option) (*Scaler, error) {
	w, err := New(cfg, opts...)
	if err != nil {
		return nil, err
	}
	if w.cfg.Admin.Address == "" {
		return nil, &ConfigError{Problems: []string{`admin.address: "" (disabled): the scaler serves the scaling signal there; set it`}}
	}
	return &Scaler{cfg: w.cfg, log: w.log, clock: w.clock, queueOpts: w.queueOpts, adminOpts: w.adminOptions, ready: make(chan struct{})}, nil
}

// Run opens the queues, serves the signal, and returns nil once ctx ends
// and the endpoint has stopped. A queue that does not open, or an address
// that cannot be listened on, is an error that matches ErrStart. A Scaler
// runs once.
func (s *Scaler) Run(ctx context.Context) error {
	s.mu.Lock()
	again := s.started
	s.started = true
	s.mu.Unlock()
	if again {
		return fmt.Errorf("%w: Scaler.Run called twice", ErrStart)
	}
	s.mu.Lock()
	s.runCtx = ctx
	s.mu.Unlock()
	qs, err := s.open(ctx)
	defer func() {
		s.endReads()
		for _, sq := range qs {
			_ = sq.q.Close()
		}
	}()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStart, err)
	}
	o := admin.Options{Address: s.cfg.Admin.Address, Token: s.cfg.Admin.Token, Logger: s.log, Clock: s.clock, MaxConns: s.cfg.Admin.MaxConnections}
	if s.adminOpts != nil {
		s.adminOpts(&o)
	}
	s.mu.Lock()
	s.queues = qs
	s.mu.Unlock()
	srv, err := admin.StartScaler(s, o)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStart, err)
	}
	s.mu.Lock()
	s.addr = srv.Addr()
	s.mu.Unlock()
	close(s.ready)
	s.log.Info("adaptq: scaler serving the scaling signal", zap.String("address", srv.Addr()), zap.Int("queues", len(qs)))
	<-ctx.Done()
	srv.Stop()
	s.mu.Lock()
	s.queues = nil
	s.mu.Unlock()
	s.endReads()
	return nil
}

// endReads refuses new depth reads and waits for those in flight, which
// ctx's end has cancelled: none outlives Run.
func (s *Scaler) endReads() {
	s.mu.Lock()
	s.readsEnded = true
	s.mu.Unlock()
	s.reads.Wait()
}

// beginRead registers a depth read, under a context that ends with Run's
// as well as with ctx; false once Run is stopping. The caller calls
// end when the read has returned.
func (s *Scaler) beginRead(ctx context.Context) (rctx context.Context, end func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.readsEnded || s.runCtx == nil || s.runCtx.Err() != nil {
		return nil, nil, false
	}
	s.reads.Add(1)
	rctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.runCtx, cancel)
	return rctx, func() {
		stop()
		cancel()
		s.reads.Done()
	}, true
}

// Ready is closed once Run serves.
func (s *Scaler) Ready() <-chan struct{} { return s.ready }

// Address is the address the scaler listens on, once it serves.
func (s *Scaler) Address() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// open opens every configured queue, metered, with its bounded depth.
func (s *Scaler) open(ctx context.Context) ([]*scalerQueue, error) {
	var qs []*scalerQueue
	var problems []string
	var causes []error
	seen := map[string]bool{}
	for i, qc := range s.cfg.Queues {
		at := fmt.Sprintf("queues[%d]", i)
		m := meter.New(0)
		q, err := queue.Open(ctx, qc.URL, append([]queue.Option{queue.WithObserver(m)}, s.queueOpts...)...)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s.url: %v", at, err))
			causes = append(causes, err)
			continue
		}
		f := q.Features()
		m.SetPrice(callPrice(s.cfg.PricePer10k, f))
		if qc.Name != "" && q.Name() != qc.Name {
			_ = q.Close()
			problems = append(problems, fmt.Sprintf("%s.name: %q but the url opens queue %q", at, qc.Name, q.Name()))
			continue
		}
		if seen[q.Name()] {
			problems = append(problems, fmt.Sprintf("queue %q is configured twice", q.Name()))
		}
		seen[q.Name()] = true
		sq := &scalerQueue{name: q.Name(), policy: qc.instances(), q: q, meter: m}
		every := ScalerDepthIntervalFree
		if f.Billed {
			every = ScalingDepthInterval
		}
		if !f.ExactCount {
			sq.hold = scaling.DefaultApproximateZeroHold
		}
		sq.depth = scaling.NewBoundedDepth(s.countLogged(q), scaling.BoundedDepthOptions{Interval: every, Clock: s.clock})
		qs = append(qs, sq)
	}
	if len(problems) > 0 {
		return qs, &ConfigError{Problems: problems, Causes: causes}
	}
	return qs, nil
}

// countLogged is q's Count, a failure logged (its secrets hidden): at most
// once per read interval, since BoundedDepth calls it no oftener. The
// read ends when Run's context does (BoundedDepth reads under a context
// of its own, which a caller's end does not cancel), and Run waits for
// it; once Run is stopping no read begins.
func (s *Scaler) countLogged(q *queue.Queue) func(context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		rctx, end, ok := s.beginRead(ctx)
		if !ok {
			return 0, ErrNotRunning
		}
		defer end()
		n, err := q.Count(rctx)
		if err != nil && ctx.Err() == nil && rctx.Err() != nil {
			return 0, fmt.Errorf("%w: the scaler is stopping", ErrNotRunning)
		}
		if err != nil {
			s.log.Warn("adaptq: scaler: reading a queue's depth failed; the signal answers 503 until a read succeeds",
				zap.String("queue", q.Name()), zap.String("error", queue.RedactText(err.Error())))
		}
		return n, err
	}
}

// Scaling is the signal GET /v1/scaling serves: per queue its depth and
// the instances it needs (scaling.Instances.DesiredOrZero), and the most
// any queue needs. The queues' depths are read at once. The error is set when a depth could not be read (that
// queue's DepthError says why, its secrets hidden) or the scaler does not
// run.
func (s *Scaler) Scaling(ctx context.Context) (admin.Scaling, error) {
	s.mu.Lock()
	qs := s.queues
	s.mu.Unlock()
	sig := admin.Scaling{Queues: []admin.QueueScaling{}}
	if len(qs) == 0 {
		return sig, ErrNotRunning
	}
	// The queues are read at once, not one after another: an autoscaler
	// gives up on a slow answer (KEDA's metrics-api after 3 s), and the
	// answer takes the slowest read, not the sum of them.
	readings := make([]scaling.DepthReading, len(qs))
	errs := make([]error, len(qs))
	panics := make([]any, len(qs))
	var wg sync.WaitGroup
	for i, sq := range qs {
		wg.Go(func() {
			// A read that panics (a driver's bug) goes on panicking in
			// the caller's goroutine, as it would have read there: in
			// this one it would end the process.
			defer func() { panics[i] = recover() }()
			readings[i], errs[i] = sq.depth.Depth(ctx)
		})
	}
	wg.Wait()
	for _, p := range panics {
		if p != nil {
			panic(p)
		}
	}
	var failed error
	for i, sq := range qs {
		p := sq.policy
		q := admin.QueueScaling{
			Name: sq.name, TargetDrainTime: admin.Duration(p.TargetDrainTime), MessagesPerInstance: p.MessagesPerInstance,
			MinInstances: p.Min, MaxInstances: p.Max,
		}
		r, err := readings[i], errs[i]
		if err == nil {
			err = r.Err
		}
		if err != nil {
			q.DepthError = queue.RedactText(err.Error())
			failed = errors.Join(failed, fmt.Errorf("%w: %q", errDepth, sq.name))
		} else {
			q.Depth = r.Depth
			q.DesiredInstances, q.Basis = p.DesiredOrZero(r, sq.hold)
			sig.DesiredInstances = max(sig.DesiredInstances, q.DesiredInstances)
		}
		sig.Queues = append(sig.Queues, q)
	}
	return sig, failed
}

// Readiness is ready once the queues are open; it makes no backend call
// (the probes need no token, so a probe must cost nothing).
func (s *Scaler) Readiness() (bool, []string) {
	s.mu.Lock()
	qs := s.queues
	s.mu.Unlock()
	if len(qs) == 0 {
		return false, []string{"not running"}
	}
	lines := make([]string, 0, len(qs))
	for _, sq := range qs {
		lines = append(lines, fmt.Sprintf("queue %s: open", sq.name))
	}
	return true, lines
}
