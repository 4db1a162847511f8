package adaptq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/scaling"
)

// ErrNoHandler: a configured queue names a handler that is not registered.
var ErrNoHandler = errNoHandler

// ErrStart wraps every error Run returns before the worker has started (a
// queue that does not open, a handler that is not registered, an admin
// address in use): the configuration or the environment is at fault, not
// the running worker.
var ErrStart = errors.New("adaptq: start-up failed")

// Worker runs the listeners of one worker process.
type Worker struct {
	cfg   Config
	log   *zap.Logger
	clock clock.Clock
	// adminOptions, if set, changes the admin endpoint's options (tests).
	adminOptions func(*admin.Options)
	mws          []handler.Middleware
	// execOut and execErr receive the output of exec: handlers.
	execOut, execErr io.Writer

	// notifier carries push triggers to the listeners of queues that have
	// one configured.
	notifier listener.LocalNotifier

	mu       sync.Mutex
	handlers map[string]handler.Func
	// batchHandlers are the handlers registered with HandleBatch, in the
	// same namespace as handlers; batchMws wrap them (WithBatchMiddleware).
	batchHandlers map[string]handler.BatchFunc
	batchMws      []handler.BatchMiddleware
	queues        []*workerQueue
	started       time.Time
	running       bool
	admin         string        // address the admin endpoint listens on, once up
	ready         chan struct{} // closed once Run has started everything

	// execLimits are the log.exec_output limits of the exec: handlers
	// made, by queue name, flushed when Run ends; under mu.
	execLimits map[string]*handler.LogLimit
	// draining is set when Run's context ends: readiness then fails.
	draining atomic.Bool

	metrics   *metrics // the worker's own Prometheus registry
	queueOpts []queue.Option

	// poisonMu serialises the poison tools (PoisonList …): two scans of
	// one poison queue at once would each see only what the other does
	// not hold.
	poisonMu sync.Mutex
}

// workerQueue is one configured queue at run time.
type workerQueue struct {
	cfg    QueueConfig
	name   string
	q      *queue.Queue // metered on meter
	poison *queue.Queue // the poison queue, on the same backend and meter
	meter  *meter.Meter
	l      *listener.Listener
	agent  *scaling.Agent
	depth  *depthCache   // the depth metrics show, read at an interval
	win    *queueWindows // samples of the counters, for the last minute and hour
	// sig reads the depth for the scaling signal on a billed backend, made
	// at its first use (scalingDepth).
	sig     *scaling.BoundedDepth
	sigOnce sync.Once
}

// Option configures a Worker.
type Option func(*Worker)

// WithLogger sets the logger (default: built from cfg.Log).
func WithLogger(l *zap.Logger) Option { return func(w *Worker) { w.log = l } }

// WithMiddleware wraps every handler in mws, first outermost.
func WithMiddleware(mws ...handler.Middleware) Option {
	return func(w *Worker) { w.mws = append(w.mws, mws...) }
}

// WithExecOutput sends the standard output and error of exec: handlers to
// stdout and stderr as they are, instead of the default: each line logged
// at info with the message's msg_id, dequeue_count and queue (see
// handler.ExecOptions.Log). The tail of standard error is kept in a
// failure's error either way.
func WithExecOutput(stdout, stderr io.Writer) Option {
	return func(w *Worker) { w.execOut, w.execErr = stdout, stderr }
}

// withClock runs the worker's listeners and agents on c (tests and the
// simulator).
func withClock(c clock.Clock) Option { return func(w *Worker) { w.clock = c } }

// withAdminOptions lets a test change the admin endpoint's options (its
// timeouts) before it starts.
func withAdminOptions(f func(*admin.Options)) Option {
	return func(w *Worker) { w.adminOptions = f }
}

// withQueueOptions opens every queue with opts besides the meter (tests
// inject faults with queue.WithWrapper).
func withQueueOptions(opts ...queue.Option) Option {
	return func(w *Worker) { w.queueOpts = append(w.queueOpts, opts...) }
}

// New returns a worker for cfg. The configuration is validated again here,
// so one built in code gets the same checks as one loaded from YAML.
func New(cfg Config, opts ...Option) (*Worker, error) {
	cfg.fillDerived()
	if p := cfg.validate(); len(p) > 0 {
		return nil, &ConfigError{Source: "(in code)", Problems: p}
	}
	w := &Worker{cfg: cfg, clock: clock.Real, handlers: map[string]handler.Func{}, ready: make(chan struct{})}
	for _, o := range opts {
		o(w)
	}
	w.metrics = newMetrics(w)
	if w.log == nil {
		l, err := NewLogger(cfg.Log)
		if err != nil {
			return nil, err
		}
		w.log = l
	}
	return w, nil
}

// NewLogger builds the zap logger a LogConfig describes, writing to
// standard error.
func NewLogger(c LogConfig) (*zap.Logger, error) { return NewLoggerTo(c, nil) }

// NewLoggerTo builds the zap logger a LogConfig describes, writing to out
// (standard error if nil). Errors carry no stack traces: adaptq's errors
// name what failed, and a poisoned message is not a crash.
func NewLoggerTo(c LogConfig, out io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return nil, fmt.Errorf("log.level: %w", err)
	}
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.Sampling = nil
	if c.Format == "console" {
		zc.Encoding = "console"
		zc.EncoderConfig = zap.NewDevelopmentEncoderConfig()
	}
	zc.DisableStacktrace = true
	zc.OutputPaths, zc.ErrorOutputPaths = []string{"stderr"}, []string{"stderr"}
	if out == nil {
		return zc.Build()
	}
	enc := zapcore.NewJSONEncoder(zc.EncoderConfig)
	if c.Format == "console" {
		enc = zapcore.NewConsoleEncoder(zc.EncoderConfig)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(out), zc.Level), zap.ErrorOutput(zapcore.AddSync(out))), nil
}

// Abort cancels every running handler at once instead of waiting out the
// shutdown grace (a second signal). Run still returns only when they have.
func (w *Worker) Abort() {
	w.mu.Lock()
	qs := append([]*workerQueue(nil), w.queues...)
	w.mu.Unlock()
	for _, wq := range qs {
		wq.l.Abort()
	}
}

// Config returns the worker's configuration, defaults filled in.
func (w *Worker) Config() Config { return w.cfg }

// Handle registers h under name. A queue uses the handler named by its
// handler key, which defaults to the queue's name.
func (w *Worker) Handle(name string, h handler.Func) error {
	if name == "" || h == nil {
		return fmt.Errorf("adaptq: Handle(%q): needs a name and a func", name)
	}
	if strings.HasPrefix(name, ExecPrefix) || strings.HasPrefix(name, HTTPPrefix) {
		return fmt.Errorf("adaptq: Handle(%q): names starting with %q or %q are reserved", name, ExecPrefix, HTTPPrefix)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.registeredLocked(name) {
		return fmt.Errorf("adaptq: Handle(%q): already registered", name)
	}
	w.handlers[name] = h
	return nil
}

// MustHandle is Handle that panics on error, for registration at start-up.
func (w *Worker) MustHandle(name string, h handler.Func) {
	if err := w.Handle(name, h); err != nil {
		panic(err)
	}
}

// Run opens every queue, starts its listener and scaling agent and the
// admin endpoint, and blocks until ctx ends; then it drains the listeners
// (each within its shutdown grace), stops the agents and the endpoint, and
// closes the queues. A queue that cannot be opened, or whose handler is not
// registered, is an error before anything starts.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return errors.New("adaptq: worker already running")
	}
	w.running = true
	w.started = w.clock.Now()
	w.mu.Unlock()
	w.draining.Store(false)
	stopDraining := context.AfterFunc(ctx, func() { w.draining.Store(true) })
	defer stopDraining()
	defer func() {
		w.mu.Lock()
		w.running = false
		w.queues = nil
		w.ready = make(chan struct{})
		w.mu.Unlock()
	}()

	// What can fail without touching a queue fails first, so that a worker
	// that cannot start leaves nothing behind (no new database file).
	if err := w.checkHandlers(); err != nil {
		return fmt.Errorf("%w: %w", ErrStart, err)
	}
	adminSrv, err := w.startAdmin()
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			err = fmt.Errorf("%w (another process listens there, perhaps a worker already running on this config: stop it, or give this worker an admin.address of its own, or \"\" for none)", err)
		}
		return fmt.Errorf("%w: %w", ErrStart, err)
	}
	stopAdmin := func() {
		if adminSrv != nil {
			adminSrv.Stop()
			adminSrv = nil
		}
	}
	defer stopAdmin()

	qs, err := w.build(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStart, err)
	}
	defer func() {
		for _, wq := range qs {
			wq.close(w.log)
		}
	}()
	startedAt := w.clock.Now()
	for _, wq := range qs {
		wq.win = newQueueWindows(func() counterSample {
			return counterSample{meter: wq.meter.Snapshot(), stats: wq.l.Stats()}
		})
		wq.win.sample(startedAt)
	}
	w.mu.Lock()
	w.queues = qs
	w.mu.Unlock()
	for _, wq := range qs {
		// Said only when the trigger trades latency for calls: with the
		// default safety_interval, idle.max, polling is as without one.
		if wq.cfg.Trigger.Enabled && w.cfg.Admin.Address == "" && !wq.q.Features().NativeNotify &&
			wq.cfg.Trigger.SafetyInterval > wq.cfg.Idle.Max {
			w.log.Warn("adaptq: trigger.enabled, but admin.address is empty: only Worker.Put in this process can pull the trigger; messages other producers put (adaptq enqueue) wait for the next poll, up to trigger.safety_interval",
				zap.String("queue", wq.name), zap.Duration("safety_interval", wq.cfg.Trigger.SafetyInterval))
		}
	}

	// Listeners run until ctx ends and then drain; agents stop with them.
	agentsCtx, stopAgents := context.WithCancel(context.WithoutCancel(ctx))
	agents, _ := errgroup.WithContext(agentsCtx)
	agents.Go(func() error { tickWindows(agentsCtx, w.clock, qs); return nil })
	for _, wq := range qs {
		agents.Go(func() error { return wq.agent.Run(agentsCtx) })
		// A queue that already holds work at start-up is busy from its first
		// get, with no idle→busy edge to wake the agent: look once now.
		wq.agent.WorkDetected()
		if wq.cfg.Trigger.Enabled && wq.q.Features().NativeNotify {
			agents.Go(func() error { w.forwardNative(agentsCtx, wq); return nil })
		}
	}
	listeners, lctx := errgroup.WithContext(ctx)
	for _, wq := range qs {
		listeners.Go(func() error {
			if err := wq.l.Run(lctx); err != nil {
				return fmt.Errorf("queue %q: %w", wq.name, err)
			}
			return nil
		})
	}
	for _, wq := range qs {
		w.log.Info("adaptq: listening", zap.String("queue", wq.name), zap.String("url", queue.Redact(wq.cfg.URL)),
			zap.Int("batch_size", wq.cfg.BatchSize), zap.Duration("visibility_timeout", wq.cfg.VisibilityTimeout),
			zap.String("handler", handlerLabel(wq.cfg.Handler)))
	}
	w.mu.Lock()
	close(w.ready)
	w.mu.Unlock()
	runErr := listeners.Wait()
	w.flushExecLimits()
	stopAgents()
	_ = agents.Wait()
	stopAdmin()
	if runErr != nil {
		return runErr
	}
	w.log.Info("adaptq: stopped")
	return nil
}

// handlerLabel shows a handler spec without the URL's secrets.
func handlerLabel(spec string) string {
	if strings.HasPrefix(spec, HTTPPrefix) {
		return HTTPPrefix + " " + queue.Redact(strings.TrimSpace(strings.TrimPrefix(spec, HTTPPrefix)))
	}
	return spec
}

// build opens the queues and makes their listeners and agents.
func (w *Worker) build(ctx context.Context) (qs []*workerQueue, err error) {
	defer func() {
		if err != nil {
			for _, wq := range qs {
				wq.close(zap.NewNop())
			}
			qs = nil
		}
	}()
	var problems []string
	var causes []error
	for i, qc := range w.cfg.Queues {
		at := fmt.Sprintf("queues[%d]", i)
		m := meter.New(0)
		raw, err := queue.Open(ctx, qc.URL, append([]queue.Option{queue.WithObserver(m)}, w.queueOpts...)...)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s.url: %v", at, err))
			causes = append(causes, err)
			continue
		}
		m.SetPrice(callPrice(w.cfg.PricePer10k, raw.Features()))
		if qc.Name != "" && raw.Name() != qc.Name {
			_ = raw.Close()
			problems = append(problems, fmt.Sprintf("%s.name: %q but the url opens queue %q", at, qc.Name, raw.Name()))
			continue
		}
		qc.Name = raw.Name()
		if qc.Handler == "" {
			qc.Handler = qc.Name
		}
		if qc.PoisonQueue == "" {
			qc.PoisonQueue = qc.Name + PoisonSuffix
		}
		if qc.PoisonQueue == qc.Name {
			// The name may have come from the URL, past the config check:
			// a queue poisoning onto itself would run a failing message
			// forever.
			_ = raw.Close()
			problems = append(problems, fmt.Sprintf("%s (%s).poison_queue: %q is the queue itself", at, qc.Name, qc.PoisonQueue))
			continue
		}
		qc.Trigger.SafetyInterval = qc.TriggerSafetyInterval(raw.Features())
		wq := &workerQueue{cfg: qc, name: qc.Name, q: raw, meter: m, depth: newDepthCache(raw, w.clock)}
		qs = append(qs, wq)
		if wq.poison, err = raw.Sibling(ctx, qc.PoisonQueue); err != nil {
			problems = append(problems, fmt.Sprintf("%s (%s).poison_queue: %v", at, qc.Name, err))
			continue
		}
		if wq.poison.Name() == wq.name {
			// However the name was spelled, the driver opened the queue itself.
			problems = append(problems, fmt.Sprintf("%s (%s).poison_queue: %q is the queue itself", at, qc.Name, qc.PoisonQueue))
			continue
		}
		h, err := w.resolve(qc)
		if err != nil {
			problems = append(problems, handlerProblem(fmt.Sprintf("%s (%s)", at, qc.Name), err))
			causes = append(causes, err)
			continue
		}
		if err := w.assemble(wq, h); err != nil {
			problems = append(problems, fmt.Sprintf("%s (%s): %v", at, qc.Name, err))
		}
	}
	seen := map[string]bool{}
	for _, wq := range qs {
		if seen[wq.name] {
			problems = append(problems, fmt.Sprintf("queue %q is configured twice", wq.name))
		}
		seen[wq.name] = true
	}
	if len(problems) > 0 {
		return qs, &ConfigError{Problems: problems, Causes: causes} // ErrStart says when
	}
	return qs, nil
}

// checkHandlers resolves, before any queue is opened, every handler the
// config names (an exec: program that is not there, a name that is not
// registered), so that such a worker fails before it creates a database
// file for nothing. A queue without a handler key is handled by the name
// in its URL, known once it is open: build checks it.
func (w *Worker) checkHandlers() error {
	var problems []string
	var causes []error
	for i, qc := range w.cfg.Queues {
		if qc.Handler == "" {
			continue
		}
		if _, err := w.resolve(qc); err != nil {
			problems = append(problems, handlerProblem(fmt.Sprintf("queues[%d]", i), err))
			causes = append(causes, err)
		}
	}
	if len(problems) > 0 {
		return &ConfigError{Problems: problems, Causes: causes}
	}
	return nil
}

// forwardNative pulls the queue's trigger whenever its backend says a
// message was put (Features().NativeNotify: a put by any process), until
// ctx ends: the push trigger with no HTTP call from the producer. If the
// backend refuses, the listener's safety interval polling remains.
func (w *Worker) forwardNative(ctx context.Context, wq *workerQueue) {
	sig, err := wq.q.Subscribe(ctx)
	if err != nil {
		w.log.Warn("adaptq: the backend's native notify is unavailable; idle tasks poll at the safety interval",
			zap.String("queue", wq.name), zap.Error(err))
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-sig:
			w.notifier.Notify(wq.name)
		}
	}
}

// notifierFor returns the worker's notifier if the queue has a trigger.
func (w *Worker) notifierFor(qc QueueConfig) listener.Notifier {
	if qc.Trigger.Enabled {
		return &w.notifier
	}
	return nil
}

// Trigger wakes the listeners of a configured queue as a push trigger
// would; it does nothing for a queue without a trigger configured.
func (w *Worker) Trigger(queueName string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wq := range w.queues {
		if wq.name == queueName {
			if wq.cfg.Trigger.Enabled {
				w.notifier.Notify(queueName)
			}
			return nil
		}
	}
	return fmt.Errorf("adaptq: no queue %q is configured", queueName)
}

// close closes the queue and its poison queue.
func (wq *workerQueue) close(log *zap.Logger) {
	for _, q := range []*queue.Queue{wq.q, wq.poison} {
		if q == nil {
			continue
		}
		if err := q.Close(); err != nil {
			log.Warn("adaptq: closing a queue failed", zap.String("queue", q.Name()), zap.Error(err))
		}
	}
}

// urlSecretEnv lists the environment variables the configured queue URLs
// name for credentials (every query parameter ending in "_env": Azure's
// key_env, sas_env, connection_string_env): an exec handler's pass_env
// prefix never passes them.
func (w *Worker) urlSecretEnv() []string {
	var names []string
	for _, qc := range w.cfg.Queues {
		for _, raw := range []string{qc.URL, qc.PoisonQueue} {
			u, err := url.Parse(raw)
			if err != nil {
				continue
			}
			for k, vs := range u.Query() {
				if strings.HasSuffix(strings.ToLower(k), "_env") {
					names = append(names, vs...)
				}
			}
		}
	}
	return names
}

// handlerFor resolves a queue's handler spec.
func (w *Worker) handlerFor(qc QueueConfig) (handler.Func, error) {
	spec := qc.Handler
	switch {
	case strings.HasPrefix(spec, ExecPrefix):
		argv, err := handler.ParseCommand(strings.TrimSpace(strings.TrimPrefix(spec, ExecPrefix)))
		if err != nil {
			return nil, err
		}
		o := handler.ExecOptions{Queue: qc.Name, PassEnv: qc.PassEnv, SecretEnv: w.urlSecretEnv(), Timeout: qc.HandlerTimeout, Stdout: w.execOut, Stderr: w.execErr}
		if w.execOut == nil && w.execErr == nil {
			o.Log = w.log
			o.LogLimit = w.execLogLimit(qc.Name)
		}
		return handler.Exec(argv, o)
	case strings.HasPrefix(spec, HTTPPrefix):
		return handler.HTTP(strings.TrimSpace(strings.TrimPrefix(spec, HTTPPrefix)), handler.HTTPOptions{Queue: qc.Name, Timeout: qc.HandlerTimeout})
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	h, ok := w.handlers[spec]
	if !ok {
		names := make([]string, 0, len(w.handlers)+len(w.batchHandlers))
		for n := range w.handlers {
			names = append(names, n)
		}
		for n := range w.batchHandlers {
			names = append(names, n)
		}
		sort.Strings(names)
		known := "none"
		if len(names) > 0 {
			known = strings.Join(names, ", ")
		}
		return nil, fmt.Errorf("%w: %q (registered: %s)", errNoHandler, spec, known)
	}
	return h, nil
}

// assemble builds a queue's listener and agent.
func (w *Worker) assemble(wq *workerQueue, qh queueHandler) error {
	qc := wq.cfg
	log := w.log.With(zap.String("queue", wq.name))
	var h handler.Func
	if qh.f != nil {
		// Metrics first: the histograms time the whole chain.
		mws := append([]handler.Middleware{w.metrics.observe(wq.name, w.clock)}, w.mws...)
		if qc.HandlerTimeout > 0 {
			mws = append(mws, handler.Timeout(qc.HandlerTimeout))
		}
		h = handler.Chain(qh.f, mws...)
	}
	var agent *scaling.Agent
	thr := 0 // the listener's default, batch_size/2
	if t := qc.NewBatchThreshold; t != nil {
		thr = -1 // 0 or -1: after the whole batch
		if *t > 0 {
			thr = *t
		}
	}
	o := listener.Options{
		BatchSize:         qc.BatchSize,
		VisibilityTimeout: qc.VisibilityTimeout,
		Concurrency:       qc.concurrency(),
		Adaptive:          qc.adaptive(),
		RateLimit:         qc.rateLimit(),
		NewBatchThreshold: thr,
		Tasks:             qc.Pool.Initial,
		MinTasks:          qc.Pool.Min,
		MaxTasks:          qc.Pool.Max,
		LatencyTarget:     qc.LatencyTarget,
		Idle:              scaling.IdleBackoff{Min: qc.Idle.Min, Max: qc.Idle.Max, Delta: qc.Idle.Delta},
		WorkDetected:      func(*listener.Listener) { agent.WorkDetected() },
		ShutdownGrace:     qc.ShutdownGrace,
		Poison:            wq.poison,
		Notifier:          w.notifierFor(qc),
		SafetyInterval:    qc.Trigger.SafetyInterval,
		MaxDequeueCount:   qc.MaxDequeueCount,
		Clock:             w.clock,
		Logger:            w.log,

		// log.failures: the failure lines each queue may write.
		FailureLogLines:    failureLogLines(w.cfg.Log.Failures.Lines),
		FailureLogInterval: w.cfg.Log.Failures.Interval,
	}
	var l *listener.Listener
	var err error
	if qh.b != nil {
		l, err = w.newBatchListener(wq, qh.b, o)
	} else {
		l, err = listener.New(wq.q, h, o)
	}
	if err != nil {
		return err
	}
	policy, err := qc.Pool.policy()
	if err != nil {
		return err
	}
	agent = scaling.NewAgent(l, policy, scaling.AgentOptions{
		MinTasks:    qc.Pool.Min,
		MaxTasks:    qc.Pool.Max,
		Interval:    qc.Pool.SampleInterval,
		ShrinkAfter: qc.Pool.ShrinkAfter,
		// Empty: back to the minimum at once, not after each surplus task's
		// backoff has run its empty gets.
		ShrinkWhenEmpty: true,
		Clock:           w.clock,
		Logger:          log,
	})
	wq.l, wq.agent = l, agent
	return nil
}

// execLogLimit makes the log.exec_output limit of a queue's exec:
// handler; nil when the config sets none (lines 0).
func (w *Worker) execLogLimit(queueName string) *handler.LogLimit {
	c := w.cfg.Log.ExecOutput
	if c.Lines <= 0 {
		return nil
	}
	lim, err := handler.NewLogLimit(c.Lines, c.Interval, w.log.With(zap.String("queue", queueName)), w.clock)
	if err != nil {
		return nil // the config check refuses such values first
	}
	w.mu.Lock()
	if w.execLimits == nil {
		w.execLimits = map[string]*handler.LogLimit{}
	}
	w.execLimits[queueName] = lim // the handler made last is the one that runs
	w.mu.Unlock()
	return lim
}

// execLimit is the log.exec_output limit of a queue's exec: handler, nil
// if it has none.
func (w *Worker) execLimit(queueName string) *handler.LogLimit {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.execLimits[queueName]
}

// flushExecLimits sums up the exec output lines left out of the log and
// not summed up yet: the window's end comes after the worker's.
func (w *Worker) flushExecLimits() {
	w.mu.Lock()
	lims := make([]*handler.LogLimit, 0, len(w.execLimits))
	for _, l := range w.execLimits {
		lims = append(lims, l)
	}
	w.mu.Unlock()
	for _, l := range lims {
		l.Flush()
	}
}

// failureLogLines maps log.failures.lines to the listener's option: 0,
// every failure, is the listener's negative.
func failureLogLines(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// Listener returns the listener of the named queue while the worker runs.
func (w *Worker) Listener(name string) (*listener.Listener, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wq := range w.queues {
		if wq.name == name {
			return wq.l, true
		}
	}
	return nil, false
}

// Ready is closed once Run has opened every queue and started listening.
func (w *Worker) Ready() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ready
}

// ErrNotRunning: Put, Queue or an admin method (Scaling, the poison tools)
// was called while the worker is not running. It is admin.ErrNotRunning, so
// that the admin endpoint answers 503.
var ErrNotRunning = admin.ErrNotRunning

// Queue returns the named queue, metered, while the worker runs. Producers
// in the worker's process (a handler that passes work on) should put
// through it, so that the meter sees every call.
func (w *Worker) Queue(name string) (*queue.Queue, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wq := range w.queues {
		if wq.name == name {
			return wq.q, nil
		}
	}
	if !w.running {
		return nil, fmt.Errorf("queue %q: %w", name, ErrNotRunning)
	}
	return nil, fmt.Errorf("adaptq: no queue %q is configured", name)
}

// Put adds a message to a configured queue, through its meter, and pulls
// the queue's push trigger if it has one.
func (w *Worker) Put(ctx context.Context, queueName string, body []byte, opts queue.PutOptions) (string, error) {
	q, err := w.Queue(queueName)
	if err != nil {
		return "", err
	}
	id, err := q.Put(ctx, body, opts)
	if err == nil && opts.InitialVisibilityDelay == 0 {
		_ = w.Trigger(queueName)
	}
	return id, err
}

// callPrice is what 10,000 calls to a queue with features f cost, for its
// meter: nothing on a backend whose calls are free (SQLite, memory,
// PostgreSQL, Redis: a server's cost does not grow with its calls); on a
// billed one the configured price_per_10k, or the backend's own list
// price (SQS: $0.004) when the config leaves the default.
func callPrice(configured float64, f driver.Features) float64 {
	switch {
	case !f.Billed:
		return 0
	case configured == meter.DefaultPricePer10k && f.PricePer10k > 0:
		return f.PricePer10k
	}
	return configured
}
