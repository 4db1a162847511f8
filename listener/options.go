package listener

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/scaling"
)

// Defaults. Each names where its number comes from.
const (
	// DefaultBatchSize is how many messages one get asks for: the most a
	// get may return (the Best Practices article), so each billed get does the most work.
	DefaultBatchSize = queue.MaxBatchSize
	// DefaultVisibilityTimeout hides a fetched message for 30 s (the message visibility article:
	// Azure's default when none is given).
	DefaultVisibilityTimeout = queue.DefaultVisibilityTimeout
	// DefaultConcurrency bounds the handlers a listener runs at once: two
	// full batches, the one being handled and the next one fetched at the
	// new-batch threshold (Azure Functions' batchSize + newBatchThreshold
	// rule, with adaptq's batch of 32).
	DefaultConcurrency = 2 * DefaultBatchSize
	// DefaultMaxTasks is the largest pool the Best Practices article's static rules ask for.
	DefaultMaxTasks = 100
	// DefaultShutdownGrace is how long running handlers may finish after
	// shutdown begins (Kubernetes' default terminationGracePeriodSeconds).
	DefaultShutdownGrace = 30 * time.Second
	// DefaultPermanentRetryDelay hides a message whose handler failed
	// permanently for this long, so that it is not retried in a tight loop
	// when no poison queue takes it.
	DefaultPermanentRetryDelay = 10 * time.Minute
	// DefaultErrorBackoffInitial and DefaultErrorBackoffMax bound the
	// exponential backoff after a failed get (Azure's storage SDK retries
	// start near one second and cap at one minute).
	DefaultErrorBackoffInitial = time.Second
	DefaultErrorBackoffMax     = time.Minute
	// DefaultDeleteTimeout bounds a delete after success, which shutdown
	// does not cancel.
	DefaultDeleteTimeout = 30 * time.Second
	// DefaultMaxDequeueCount is how many runs a failing message gets before
	// it moves to the poison queue (Azure Functions' maxDequeueCount).
	DefaultMaxDequeueCount = 5
)

// Dispatch selects how a batch's handlers are run.
type Dispatch int

const (
	// DispatchAuto runs fast handlers one after another on one goroutine
	// per batch and slow ones in parallel, measuring as it goes; a batch
	// whose sequential run stalls spills its remaining messages onto
	// parallel runners.
	DispatchAuto Dispatch = iota
	// DispatchParallel starts every message of a batch on its own
	// goroutine at once (within the concurrency bound).
	DispatchParallel
)

// Options configure a Listener. The zero value uses every default.
type Options struct {
	// BatchSize is the n of each get, 1..32; a driver whose gets return
	// fewer (Features().MaxBatch: SQS's 10) lowers it to its maximum.
	BatchSize int
	// VisibilityTimeout hides fetched messages; a handler still running at
	// half of it has its messages' visibility extended.
	VisibilityTimeout time.Duration
	// Concurrency bounds the messages held by handlers at once (with
	// Adaptive: the most the adaptive limit may reach, unless Adaptive.Max
	// says).
	Concurrency int
	// Adaptive, if set, makes the concurrency adapt to the downstream
	// (scaling.AIMD): it climbs slowly from Adaptive.Initial while
	// handlers succeed and their latency holds, and is cut on overload
	// signals (handler.IsOverloaded: HTTP 429 or 503, Retry-After, a
	// timeout, handler.Overloaded). A failure for overload does not count
	// towards the message's poisoning. Max 0 is Concurrency.
	Adaptive *scaling.AIMDOptions
	// RateLimit bounds the messages started a second (see RateLimit).
	RateLimit RateLimit
	// NewBatchThreshold: a task fetches its next batch once no more than
	// this many of its messages are still being handled. 0 means
	// BatchSize/2 (Azure Functions' default); a negative value waits for
	// the whole batch.
	NewBatchThreshold int
	// Tasks is the number of dequeue tasks Run starts with (default 1).
	// Left 0, the pool also grows by one task after each get that comes
	// back full, up to the driver's Features().BusyTasks (PostgreSQL: 8;
	// Redis: 4; 0 elsewhere), and the idle rule stops the added tasks once the queue
	// is drained; a Tasks given (the worker gives pool.initial and resizes
	// by its policy) is never grown, nor a pool once Resize has sized it.
	Tasks int
	// MinTasks is the fewest tasks the idle stop rule leaves (default 1).
	MinTasks int
	// MaxTasks is the most tasks Resize starts (default DefaultMaxTasks).
	MaxTasks int

	// LatencyTarget is the pickup latency the queue accepts. Its half, the
	// cadence, is the trigger floor (a woken task gets no sooner than that
	// after its last empty get), the least time between gets after one
	// that found the queue drained (returned fewer than asked), and idle.min
	// and idle.delta where Idle leaves them 0. 0 means
	// DefaultLatencyTarget(queue's Features().Billed): cost-first (200 ms)
	// on a billed backend, latency-first (10 ms) otherwise.
	LatencyTarget time.Duration
	// Idle is the backoff the default QueueEmpty hook uses; Min and Delta
	// left 0 are LatencyTarget/2.
	Idle scaling.IdleBackoff
	// QueueEmpty is called after each empty get with the task's count of
	// empty gets in a row; it returns how long the task sleeps and whether
	// it stops (the Best Practices article's QueueEmpty event). The listener refuses a stop
	// that would leave fewer than MinTasks. Default: Idle's formula and
	// stop rule.
	QueueEmpty func(l *Listener, idleCount int) (delay time.Duration, stop bool)
	// WorkDetected is called, on the task's goroutine, when a task that
	// was idle finds messages: once per idle→busy edge (the Best Practices article's
	// QueueWorkDetected). It must not block.
	WorkDetected func(l *Listener)

	// Notifier, if set, is the push trigger: a Notify of the queue's name
	// wakes every sleeping task and fires WorkDetected. With a trigger, the
	// default QueueEmpty rule lets idle tasks stop down to MinTasks as
	// usual, but the last ones back off up to SafetyInterval instead of
	// Idle.Max: idle polling costs almost nothing, and a lost trigger
	// delays work by at most SafetyInterval.
	Notifier Notifier
	// SafetyInterval is the longest idle sleep with a trigger (default
	// DefaultSafetyInterval).
	SafetyInterval time.Duration

	// RetryDelay says how long to hide a message whose handler failed
	// (0: leave it; it reappears when its visibility timeout ends).
	// Default: DefaultPermanentRetryDelay for permanent errors, the
	// server's hint for errors carrying one (queue.RetryAfter), else 0.
	// No hide outlives the message: a delay (or a visibility timeout) that
	// would end too close to the message's expiry for a get to find it
	// again is cut short, but not below MinRetryHide; a message with too
	// little left for that, a server's hint that cannot be honoured before
	// the expiry, or a message that expired while its handler ran, is
	// poisoned instead (poison.RuleExpiring), where there is a poison
	// queue (without one, a message with too little left is hidden until
	// it expires). A failure for want of the worker's own resources
	// (handler.IsWorkerFault) is not hidden: the message stays held and
	// runs again here when the gets' pause ends (handed back at once if
	// the listener shuts down first; not run again if its lease or its
	// time-to-live ended meanwhile, the latter poisoned rather than lost),
	// and does not count towards its poisoning.
	RetryDelay func(m *queue.Message, err error) time.Duration

	// Poison receives messages that cannot be processed (Azure Functions'
	// rules): a message fetched with a dequeue count above
	// MaxDequeueCount goes there without running (it crashed a worker
	// before); a failure at MaxDequeueCount, or a permanent failure, goes
	// there after its run. A failure for want of the worker's own
	// resources (handler.IsWorkerFault) raises no dequeue count, since the
	// message is run again in the same delivery, so no restart can make
	// such failures look like a crash loop. The body is kept byte for byte, the message is
	// put to Poison first and deleted from the queue after. Nil disables
	// poisoning: failures are retried while the message lives.
	Poison *queue.Queue
	// MaxDequeueCount is the number of runs before poisoning (default
	// DefaultMaxDequeueCount).
	MaxDequeueCount int

	// ShutdownGrace is how long running handlers may finish after the
	// run's context ends; then their contexts are cancelled.
	ShutdownGrace time.Duration
	// ErrorBackoffInitial and ErrorBackoffMax shape the backoff after a
	// failed get.
	ErrorBackoffInitial, ErrorBackoffMax time.Duration

	// Dispatch selects how handlers of a batch run (default DispatchAuto).
	Dispatch Dispatch

	// BatchMax and BatchWait shape the calls of a batch handler (NewBatch
	// only; New refuses them). BatchMax is the most messages one call gets
	// (1..MaxBatchMax, default DefaultBatchMax): a call may take more than
	// one get brings, filling from several. BatchWait is the longest the
	// oldest message of a partial call waits for it to fill, by Clock (0:
	// a call starts with what has been fetched as soon as a call slot is
	// free). With a batch handler, Concurrency counts calls (default
	// DefaultBatchConcurrency), and the tasks hold at most
	// (Concurrency+1)·BatchMax messages.
	BatchMax  int
	BatchWait time.Duration

	// Clock drives sleeps, backoff, renewal and the grace period (default
	// the wall clock; tests and the simulator pass a fake).
	Clock clock.Clock
	// Logger receives the listener's logs (default: none).
	Logger *zap.Logger
	// FailureLogLines and FailureLogInterval rate-limit the lines Logger
	// gets for handler failures: at most FailureLogLines per
	// FailureLogInterval (defaults DefaultFailureLogLines and
	// DefaultFailureLogInterval); the failures left out are counted and
	// summed up in one line before the next failure line, or when the
	// listener stops. A negative FailureLogLines logs every failure.
	// Poisoned messages are always logged.
	FailureLogLines    int
	FailureLogInterval time.Duration

	// Tracer follows each handled message (see Tracer). Default: the
	// tracing package tracing registered when the program imports it
	// (OpenTelemetry's global provider), else none. NoTracer turns the
	// default off.
	Tracer   Tracer
	NoTracer bool
}

func (o Options) withDefaults() Options {
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.VisibilityTimeout == 0 {
		o.VisibilityTimeout = DefaultVisibilityTimeout
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	switch {
	case o.NewBatchThreshold == 0:
		o.NewBatchThreshold = o.BatchSize / 2
	case o.NewBatchThreshold < 0:
		o.NewBatchThreshold = 0
	}
	if o.Tasks == 0 {
		o.Tasks = 1
	}
	if o.MinTasks == 0 {
		o.MinTasks = 1
	}
	if o.MaxTasks == 0 {
		o.MaxTasks = DefaultMaxTasks
	}
	o.Idle = o.Idle.WithDefaults()
	if o.SafetyInterval == 0 {
		o.SafetyInterval = DefaultSafetyInterval
	}
	if o.MaxDequeueCount == 0 {
		o.MaxDequeueCount = DefaultMaxDequeueCount
	}
	if o.RetryDelay == nil {
		o.RetryDelay = defaultRetryDelay
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = DefaultShutdownGrace
	}
	if o.ErrorBackoffInitial == 0 {
		o.ErrorBackoffInitial = DefaultErrorBackoffInitial
	}
	if o.ErrorBackoffMax == 0 {
		o.ErrorBackoffMax = DefaultErrorBackoffMax
	}
	if o.Clock == nil {
		o.Clock = clock.Real
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.FailureLogLines == 0 {
		o.FailureLogLines = DefaultFailureLogLines
	}
	if o.FailureLogInterval == 0 {
		o.FailureLogInterval = DefaultFailureLogInterval
	}
	return o
}

// fitBatch lowers the batch size to the driver's largest get (SQS: 10), so
// that the defaults work on every backend, and a new-batch threshold left
// to its default with it.
func (o *Options) fitBatch(maxBatch int) {
	if o.BatchSize <= maxBatch {
		return
	}
	if o.NewBatchThreshold == o.BatchSize/2 {
		o.NewBatchThreshold = maxBatch / 2
	}
	o.BatchSize = maxBatch
	o.NewBatchThreshold = min(o.NewBatchThreshold, maxBatch-1)
}

// defaultRetryDelay hides a permanently failed message for
// DefaultPermanentRetryDelay, and one whose handler passed on a server's
// Retry-After (an HTTP handler's 429 or 503) for as long as asked; other
// failures reappear when their visibility timeout ends.
func defaultRetryDelay(_ *queue.Message, err error) time.Duration {
	if handler.IsPermanent(err) {
		return DefaultPermanentRetryDelay
	}
	if d, ok := queue.RetryAfter(err); ok {
		return d
	}
	return 0
}

// validate names the first bad field and its value.
func (o Options) validate() error {
	bad := func(field string, v any, why string) error {
		return fmt.Errorf("listener: %s: %v %s", field, v, why)
	}
	switch {
	case o.BatchSize < 1 || o.BatchSize > queue.MaxBatchSize:
		return bad("batch_size", o.BatchSize, fmt.Sprintf("is outside 1..%d", queue.MaxBatchSize))
	case o.VisibilityTimeout <= 0 || o.VisibilityTimeout > queue.MaxVisibilityTimeout:
		return bad("visibility_timeout", o.VisibilityTimeout, fmt.Sprintf("is outside (0, %s]", queue.MaxVisibilityTimeout))
	case o.Concurrency < 1:
		return bad("concurrency", o.Concurrency, "is below 1")
	case o.LatencyTarget < 0:
		return bad("latency_target", o.LatencyTarget, "is negative")
	case o.NewBatchThreshold >= o.BatchSize:
		return bad("new_batch_threshold", o.NewBatchThreshold, fmt.Sprintf("is not below the batch size %d", o.BatchSize))
	case o.MinTasks < 1:
		return bad("min_tasks", o.MinTasks, "is below 1")
	case o.MaxTasks < o.MinTasks:
		return bad("max_tasks", o.MaxTasks, fmt.Sprintf("is below min_tasks %d", o.MinTasks))
	case o.Tasks < 1 || o.Tasks > o.MaxTasks:
		return bad("tasks", o.Tasks, fmt.Sprintf("is outside 1..max_tasks %d", o.MaxTasks))
	case o.SafetyInterval < o.Idle.Max:
		return bad("safety_interval", o.SafetyInterval, fmt.Sprintf("is below idle.max %s", o.Idle.Max))
	case o.MaxDequeueCount < 1:
		return bad("max_dequeue_count", o.MaxDequeueCount, "is below 1")
	case o.ShutdownGrace < 0:
		return bad("shutdown_grace", o.ShutdownGrace, "is negative")
	case o.FailureLogInterval < 0:
		return bad("failure_log_interval", o.FailureLogInterval, "is negative")
	case o.ErrorBackoffInitial < 0 || o.ErrorBackoffMax < o.ErrorBackoffInitial:
		return bad("error_backoff", fmt.Sprintf("%s..%s", o.ErrorBackoffInitial, o.ErrorBackoffMax), "is not a valid range")
	}
	if err := o.Idle.Validate(); err != nil {
		return fmt.Errorf("listener: idle: %w", err)
	}
	return o.validateFlow()
}
