package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/adaptq/adaptq/queue/driver"
)

// Limits and defaults shared by every driver. They are Azure Queue Storage's,
// so that a configuration moves between backends unchanged.
const (
	// MaxBatchSize is the most messages one Get may ask for (the Best Practices article: "the
	// maximum size of the Queue Service API package for a remove from a queue
	// operation is 32. Exceeding this value will result in a runtime
	// exception").
	MaxBatchSize = 32

	// DefaultMaxBodySize is the largest message body a driver accepts unless
	// it states otherwise: Azure's 64 KiB message limit.
	DefaultMaxBodySize = 64 * 1024

	// DefaultTTL is how long a message lives when PutOptions.TTL is zero
	// (the Windows Azure Queue white paper: messages are kept for 7 days).
	DefaultTTL = 7 * 24 * time.Hour

	// DefaultVisibilityTimeout is the visibility timeout the message visibility article gives for a
	// get that names none ("If not explicitly set, it will default to 30
	// seconds"). Get itself always takes an explicit timeout; callers use
	// this constant as their default.
	DefaultVisibilityTimeout = 30 * time.Second

	// MaxVisibilityTimeout is the longest a message can be hidden by Get or
	// UpdateVisibility, or delayed by PutOptions.InitialVisibilityDelay
	// (Azure's 7 days).
	MaxVisibilityTimeout = 7 * 24 * time.Hour

	// MaxPeek is the most messages one Peek may return (Azure's limit, the
	// same as MaxBatchSize).
	MaxPeek = 32
)

// NoExpiry as PutOptions.TTL keeps a message until it is deleted (Azure's
// messagettl=-1).
const NoExpiry = driver.NoExpiry

// Message is one message as a consumer sees it. Get fills every field; Peek
// fills all but PopReceipt.
type Message struct {
	// ID identifies the message for its whole life, across every delivery.
	// It is the key for idempotent processing.
	ID string
	// PopReceipt proves the holder got the message in the newest Get (or
	// UpdateVisibility). Delete and UpdateVisibility need it.
	PopReceipt string
	// Body holds the bytes exactly as they were put.
	Body []byte
	// DequeueCount is how many times the message has been got, this time
	// included.
	DequeueCount int
	// InsertedAt is when the message was put.
	InsertedAt time.Time
	// ExpiresAt is when the message's time-to-live ends. A message put with
	// NoExpiry has the zero time.
	ExpiresAt time.Time
	// NextVisibleAt is when the message becomes visible again if it is not
	// deleted first.
	NextVisibleAt time.Time
	// Metadata is the string map the message was put with; nil for none.
	Metadata map[string]string
}

// PutOptions tune one Put. The zero value puts a message that is visible at
// once and lives for DefaultTTL.
type PutOptions struct {
	// TTL is the message's time-to-live: zero means DefaultTTL, NoExpiry
	// means forever; any other negative value is an error.
	TTL time.Duration
	// InitialVisibilityDelay keeps a new message hidden for this long (0 to
	// MaxVisibilityTimeout, and shorter than TTL).
	InitialVisibilityDelay time.Duration
	// Metadata is a small string map stored with the message and returned
	// with it (a tenant, a correlation id, trace context); nil for none.
	Metadata map[string]string
}

// Receipt names one held message: what Delete needs.
type Receipt struct {
	ID         string
	PopReceipt string
}

// Message and Receipt have the fields of driver.Message and driver.Receipt,
// so slices of them are handed over without a copy (see messages).
var (
	_ = (*Message)((*driver.Message)(nil))
	_ = (*driver.Receipt)((*Receipt)(nil))
)

// messages views a driver's messages as the package's own: the two types
// have identical fields (checked above), so their pointers convert.
func messages(ms []*driver.Message) []*Message {
	if len(ms) == 0 {
		return nil
	}
	return unsafe.Slice((**Message)(unsafe.Pointer(unsafe.SliceData(ms))), len(ms))
}

// checkOutput refuses a driver's answer of more messages than asked for
// (the listener holds one slot per message it asked for) and drops nil
// entries.
func checkOutput(ms []*driver.Message, n int) ([]*driver.Message, error) {
	if len(ms) > n {
		return nil, fmt.Errorf("the driver returned %d messages for a request of %d", len(ms), n)
	}
	for i, m := range ms {
		if m == nil {
			kept := ms[:i:i]
			for _, m := range ms[i:] {
				if m != nil {
					kept = append(kept, m)
				}
			}
			return kept, nil
		}
	}
	return ms, nil
}

// driverReceipts views receipts as the driver's type, without a copy.
func driverReceipts(rs []Receipt) []driver.Receipt {
	return unsafe.Slice((*driver.Receipt)(unsafe.Pointer(unsafe.SliceData(rs))), len(rs))
}

// Queue is one named queue on one backend: what programs, the listener and
// the worker hold, whatever the backend. Get one from Open (by URL) or from
// a driver package's constructor; New wraps a driver.Queue.
//
// Every method checks its arguments against the driver's Features before
// the backend sees them (ErrBatchSize, ErrTooLarge, ErrInvalidArgument,
// ErrInvalidName), fails with ErrClosed after Close, and wraps the driver's
// errors with the driver's name, the operation and the queue's name. Errors
// keep the contract's sentinels for errors.Is, and IsTransient and
// RetryAfter say what the driver's classification said. Observers (the
// cost meter) see every call. A Queue is safe for concurrent use.
type Queue struct {
	d      driver.Queue
	raw    driver.Queue // d before the wrappers: what Sibling asks
	f      driver.Features
	name   string
	opts   options
	tracer Tracer // nil: no tracing (see trace.go)
	closed atomic.Bool
}

// Option configures a Queue.
type Option func(*options)

type options struct {
	observers []Observer
	wrappers  []func(driver.Queue) driver.Queue
	tracer    Tracer // see WithTracer
	tracerSet bool
}

// WithObserver makes o see every call the queue makes to its backend (the
// cost meter; metrics). Siblings opened from the queue share it.
func WithObserver(o Observer) Option {
	return func(op *options) { op.observers = append(op.observers, o) }
}

// WithWrapper wraps the driver in w before the queue uses it: fault or
// latency injection, tracing, a log of calls. A wrapper that embeds the
// driver.Queue it is given forwards every operation and the Features, so
// no capability (batch deletes, siblings, native notify) is lost through
// it. Wrappers given first end up outermost. A sibling (Sibling) is wrapped
// the same way: w is called again with the sibling's driver, so it must
// return a new value for each driver it is given.
func WithWrapper(w func(driver.Queue) driver.Queue) Option {
	return func(op *options) { op.wrappers = append(op.wrappers, w) }
}

// New returns the portable queue over d. Features that d leaves zero get
// the contract's defaults: MaxBatch MaxBatchSize, MaxBody
// DefaultMaxBodySize.
func New(d driver.Queue, opts ...Option) *Queue {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return newQueue(d, o)
}

func newQueue(d driver.Queue, o options) *Queue {
	raw := d
	for i := len(o.wrappers) - 1; i >= 0; i-- {
		d = o.wrappers[i](d)
	}
	f := d.Features()
	if f.MaxBatch <= 0 || f.MaxBatch > MaxBatchSize {
		f.MaxBatch = MaxBatchSize
	}
	if f.MaxBody <= 0 {
		f.MaxBody = DefaultMaxBodySize
	}
	f.MaxPeek = min(max(f.MaxPeek, 0), MaxPeek)
	if f.Name == "" {
		f.Name = "queue"
	}
	return &Queue{d: d, raw: raw, f: f, name: d.Name(), opts: o, tracer: tracerOf(o)}
}

// Name is the queue's name.
func (q *Queue) Name() string { return q.name }

// Features describes the backend: its limits and capabilities.
func (q *Queue) Features() driver.Features { return q.f }

// MaxBodySize is the largest body Put accepts, in bytes.
func (q *Queue) MaxBodySize() int { return q.f.MaxBody }

// As sets target to the driver's own client or handle if target points to
// its type (see each driver's package doc), and reports whether it did.
// Errors need no As: errors.As reaches the driver's error types through the
// queue's wrapping.
func (q *Queue) As(target any) bool { return q.d.As(target) }

// Close releases what the queue holds; the messages stay. Calls after Close
// fail with ErrClosed. Closing twice is a no-op.
func (q *Queue) Close() error {
	if q.closed.Swap(true) {
		return nil
	}
	return q.d.Close()
}

// Put adds a message and returns its id. A body larger than the driver's
// limit is ErrTooLarge, and metadata over Features().Metadata's limits a
// *MetadataError (ErrInvalidMetadata); nothing is written then. Once Put returns nil the
// message is stored (durably, on a durable driver). An error means nothing
// was written, except a transient error from a network backend that cannot
// know (a timeout after sending): a retry may then store the message twice,
// which at-least-once consumers tolerate.
func (q *Queue) Put(ctx context.Context, body []byte, opts PutOptions) (string, error) {
	if q.tracer != nil {
		return q.tracedPut(ctx, body, opts)
	}
	return q.putUntraced(ctx, body, opts)
}

func (q *Queue) putUntraced(ctx context.Context, body []byte, opts PutOptions) (string, error) {
	if err := q.begin(ctx, OpPut); err != nil {
		return "", err
	}
	dopts, err := q.checkPut(body, opts)
	if err != nil {
		return "", q.reject(OpPut, err)
	}
	return q.put(ctx, body, dopts)
}

// checkPut checks one message as Put and PutBatch take it (its body, its
// options, its metadata against Features().Metadata), and resolves its
// options for the driver.
func (q *Queue) checkPut(body []byte, opts PutOptions) (driver.PutOptions, error) {
	ttl, err := CheckPut(body, opts, q.f.MaxBody)
	if err == nil {
		err = driver.CheckMetadata(opts.Metadata, q.f.Metadata, len(body), q.f.MaxBody)
	}
	if err != nil {
		return driver.PutOptions{}, err
	}
	return driver.PutOptions{TTL: ttl, InitialVisibilityDelay: opts.InitialVisibilityDelay, Metadata: opts.Metadata}, nil
}

// put is one checked Put's call of the driver.
func (q *Queue) put(ctx context.Context, body []byte, dopts driver.PutOptions) (string, error) {
	id, err := q.d.Put(ctx, body, dopts)
	if err != nil {
		return "", q.fail(ctx, OpPut, 0, err)
	}
	q.observeSize(OpPut, 1, len(body), nil)
	return id, nil
}

// Get returns up to n visible messages (1 ≤ n ≤ Features().MaxBatch, else
// ErrBatchSize), each now hidden for visibility (0 < visibility ≤
// MaxVisibilityTimeout) with a fresh PopReceipt and its DequeueCount
// incremented. An empty queue returns no messages and no error. Messages
// come oldest first: by the time they became visible, then by when they
// were put. Embedded drivers keep this order exactly; Azure keeps it
// approximately, so no consumer may depend on it.
func (q *Queue) Get(ctx context.Context, n int, visibility time.Duration) ([]*Message, error) {
	return q.get(ctx, n, visibility, 0)
}

// GetWait is Get that, on an empty queue, lets the backend hold the call
// open for up to wait (cut to Features().LongPoll) and returns as soon as
// messages arrive: a long poll, one billed call however long it waits.
// Where the backend cannot (LongPoll is 0) it is Get, and returns at once.
// Cancelling ctx ends the wait; a call cut off midway may have hidden
// messages it never returns, which reappear after their visibility
// timeout.
func (q *Queue) GetWait(ctx context.Context, n int, visibility, wait time.Duration) ([]*Message, error) {
	return q.get(ctx, n, visibility, min(max(wait, 0), q.f.LongPoll))
}

func (q *Queue) get(ctx context.Context, n int, visibility, wait time.Duration) ([]*Message, error) {
	if err := q.begin(ctx, OpGet); err != nil {
		return nil, err
	}
	if n < 1 || n > q.f.MaxBatch {
		return nil, q.reject(OpGet, fmt.Errorf("%w: %d is outside 1..%d", ErrBatchSize, n, q.f.MaxBatch))
	}
	if err := checkVisibility(visibility); err != nil {
		return nil, q.reject(OpGet, err)
	}
	dctx := ctx
	if wait > 0 {
		dctx = driver.WithWait(ctx, wait)
	}
	ms, err := q.d.Get(dctx, n, visibility)
	if err == nil {
		ms, err = checkOutput(ms, n)
	}
	if err != nil {
		return nil, q.fail(ctx, OpGet, 0, err)
	}
	size := 0
	for _, m := range ms {
		size += len(m.Body)
	}
	q.observeSize(OpGet, len(ms), size, nil)
	return messages(ms), nil
}

// Delete removes a message. It succeeds only with the newest receipt; a
// stale receipt is ErrReceiptMismatch, an id that is gone ErrNotFound.
func (q *Queue) Delete(ctx context.Context, id, popReceipt string) error {
	if err := q.begin(ctx, OpDelete); err != nil {
		return err
	}
	return q.delete(ctx, id, popReceipt)
}

func (q *Queue) delete(ctx context.Context, id, popReceipt string) error {
	if err := ctx.Err(); err != nil {
		return q.reject(OpDelete, err) // deleteEach: the context ended midway
	}
	if id == "" {
		return q.reject(OpDelete, fmt.Errorf("%w: empty message id", ErrNotFound))
	}
	if err := q.d.Delete(ctx, id, popReceipt); err != nil {
		return q.fail(ctx, OpDelete, 0, err)
	}
	q.observe(OpDelete, 1, nil)
	return nil
}

// DeleteBatch deletes the messages named by receipts with as few backend
// calls as the driver allows: one per Features().MaxBatch receipts where the
// driver deletes in batches, else one Delete per message, run concurrently.
// results has one entry per receipt, in order: nil where the message was
// deleted, else what Delete would have returned (a failed batch call
// reports its error for each of its receipts). err is for a call refused as
// a whole (a closed queue, a cancelled context); results is then nil.
func (q *Queue) DeleteBatch(ctx context.Context, receipts []Receipt) (results []error, err error) {
	if len(receipts) == 0 {
		return nil, nil
	}
	if err := q.begin(ctx, OpDeleteBatch); err != nil {
		return nil, err
	}
	if !q.f.BatchDelete {
		return q.deleteEach(ctx, receipts), nil
	}
	results = make([]error, len(receipts))
	rs := driverReceipts(receipts)
	for start := 0; start < len(rs); start += q.f.MaxBatch {
		end := min(start+q.f.MaxBatch, len(rs))
		if cerr := ctx.Err(); cerr != nil {
			cerr = q.reject(OpDeleteBatch, cerr)
			for i := start; i < len(rs); i++ {
				results[i] = cerr
			}
			break
		}
		res, err := q.d.DeleteBatch(ctx, rs[start:end])
		if err == nil && len(res) != end-start {
			err = fmt.Errorf("the driver returned %d results for %d receipts", len(res), end-start)
		}
		if err != nil {
			err = q.fail(ctx, OpDeleteBatch, 0, err)
			for i := start; i < end; i++ {
				results[i] = err
			}
			continue
		}
		deleted := 0
		for i, r := range res {
			if r != nil {
				results[start+i] = q.classified(OpDelete, r)
			} else {
				deleted++
			}
		}
		q.observe(OpDeleteBatch, deleted, nil)
	}
	return results, nil
}

// deleteEach deletes receipts with one Delete each, up to MaxBatchSize at
// once, for drivers without a batch delete (Azure bills every delete
// anyway, and a round trip per message one after another would hold a
// consumer back). A receipt whose id came earlier in the list is deleted
// after the earlier one, so results are those of deleting in order: the
// repeat finds its message gone.
func (q *Queue) deleteEach(ctx context.Context, receipts []Receipt) []error {
	results := make([]error, len(receipts))
	if len(receipts) == 1 {
		results[0] = q.delete(ctx, receipts[0].ID, receipts[0].PopReceipt)
		return results
	}
	seen := make(map[string]bool, len(receipts))
	var repeats []int
	sem := make(chan struct{}, MaxBatchSize)
	var wg sync.WaitGroup
	for i, r := range receipts {
		if seen[r.ID] {
			repeats = append(repeats, i)
			continue
		}
		seen[r.ID] = true
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			results[i] = q.delete(ctx, r.ID, r.PopReceipt)
		})
	}
	wg.Wait()
	for _, i := range repeats {
		results[i] = q.delete(ctx, receipts[i].ID, receipts[i].PopReceipt)
	}
	return results
}

// UpdateVisibility hides a held message for d from now (0 makes it visible
// at once; at most MaxVisibilityTimeout) and returns the new receipt; the
// old one is stale.
func (q *Queue) UpdateVisibility(ctx context.Context, id, popReceipt string, d time.Duration) (string, error) {
	if err := q.begin(ctx, OpUpdate); err != nil {
		return "", err
	}
	if err := checkUpdateVisibility(d); err != nil {
		return "", q.reject(OpUpdate, err)
	}
	if id == "" {
		return "", q.reject(OpUpdate, fmt.Errorf("%w: empty message id", ErrNotFound))
	}
	r, err := q.d.UpdateVisibility(ctx, id, popReceipt, d)
	if err != nil {
		return "", q.fail(ctx, OpUpdate, 0, err)
	}
	q.observe(OpUpdate, 1, nil)
	return r, nil
}

// UpdateVisibilityBatch is UpdateVisibility for many held messages, with as
// few backend calls as the driver allows: one per Features().MaxBatch
// receipts where it changes visibilities in batches (SQS), else one
// UpdateVisibility each, run concurrently. newReceipts and results have
// one entry per receipt, in order: the new receipt and nil, or "" and what
// UpdateVisibility would have returned (a failed batch call reports its
// error for each of its receipts). err is for a call refused as a whole (a
// closed queue, an ended context, d out of range).
func (q *Queue) UpdateVisibilityBatch(ctx context.Context, receipts []Receipt, d time.Duration) (newReceipts []string, results []error, err error) {
	if len(receipts) == 0 {
		return nil, nil, nil
	}
	if err := q.begin(ctx, OpUpdate); err != nil {
		return nil, nil, err
	}
	if err := checkUpdateVisibility(d); err != nil {
		return nil, nil, q.reject(OpUpdate, err)
	}
	newReceipts = make([]string, len(receipts))
	results = make([]error, len(receipts))
	vb, ok := q.d.(driver.VisibilityBatcher)
	if !ok {
		sem := make(chan struct{}, MaxBatchSize)
		var wg sync.WaitGroup
		for i, r := range receipts {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				newReceipts[i], results[i] = q.UpdateVisibility(ctx, r.ID, r.PopReceipt, d)
			})
		}
		wg.Wait()
		return newReceipts, results, nil
	}
	rs := driverReceipts(receipts)
	for start := 0; start < len(rs); start += q.f.MaxBatch {
		end := min(start+q.f.MaxBatch, len(rs))
		nr, res, err := vb.UpdateVisibilityBatch(ctx, rs[start:end], d)
		if err == nil && (len(res) != end-start || len(nr) != end-start) {
			err = fmt.Errorf("the driver returned %d results for %d receipts", len(res), end-start)
		}
		if err != nil {
			err = q.fail(ctx, OpUpdate, 0, err)
			for i := start; i < end; i++ {
				results[i] = err
			}
			continue
		}
		updated := 0
		for i, r := range res {
			if r != nil {
				results[start+i] = q.classified(OpUpdate, r)
			} else {
				newReceipts[start+i] = nr[i]
				updated++
			}
		}
		q.observe(OpUpdate, updated, nil)
	}
	return newReceipts, results, nil
}

// Peek returns up to n (1..Features().MaxPeek) visible messages without
// hiding them or changing their receipts or dequeue counts. PopReceipt is
// empty. A backend that cannot peek returns ErrUnsupported.
func (q *Queue) Peek(ctx context.Context, n int) ([]*Message, error) {
	if err := q.begin(ctx, OpPeek); err != nil {
		return nil, err
	}
	if q.f.MaxPeek == 0 {
		return nil, q.reject(OpPeek, fmt.Errorf("%w: %s cannot peek", ErrUnsupported, q.f.Name))
	}
	if n < 1 || n > q.f.MaxPeek {
		return nil, q.reject(OpPeek, fmt.Errorf("%w: peek of %d is outside 1..%d", ErrBatchSize, n, q.f.MaxPeek))
	}
	ms, err := q.d.Peek(ctx, n)
	if err == nil {
		ms, err = checkOutput(ms, n)
	}
	if err != nil {
		return nil, q.fail(ctx, OpPeek, 0, err)
	}
	q.observe(OpPeek, len(ms), nil)
	return messages(ms), nil
}

// Count is the number of messages, visible or not: exact where
// Features().ExactCount, else approximate (Azure's
// ApproximateMessagesCount).
func (q *Queue) Count(ctx context.Context) (int, error) {
	if err := q.begin(ctx, OpCount); err != nil {
		return 0, err
	}
	n, err := q.d.Count(ctx)
	if err != nil {
		return 0, q.fail(ctx, OpCount, 0, err)
	}
	q.observe(OpCount, n, nil)
	return n, nil
}

// Clear deletes every message of the queue.
func (q *Queue) Clear(ctx context.Context) error {
	if err := q.begin(ctx, OpClear); err != nil {
		return err
	}
	if err := q.d.Clear(ctx); err != nil {
		return q.fail(ctx, OpClear, 0, err)
	}
	q.observe(OpClear, 0, nil)
	return nil
}

// Sibling opens the queue called name on q's backend (the same file,
// account or server), with q's observers and wrappers: how a worker opens a
// poison queue that has no URL of its own. It is closed separately. A
// backend that cannot is ErrUnsupported.
func (q *Queue) Sibling(ctx context.Context, name string) (*Queue, error) {
	if err := q.begin(ctx, OpSibling); err != nil {
		return nil, err
	}
	if err := ValidateName(name); err != nil {
		return nil, q.wrap(OpSibling, err)
	}
	if !q.f.Siblings {
		return nil, q.wrap(OpSibling, fmt.Errorf("%w: %s cannot open queue %q beside it", ErrUnsupported, q.f.Name, name))
	}
	d, err := q.raw.Sibling(ctx, name)
	if err != nil {
		return nil, q.classified(OpSibling, err)
	}
	return newQueue(d, q.opts), nil
}

// Subscribe returns a channel that receives soon after a message is put to
// the queue, by this process or another, until ctx ends: the backend's own
// push trigger (Features().NativeNotify), which the listener can use
// instead of polling. A backend without one returns ErrUnsupported.
func (q *Queue) Subscribe(ctx context.Context) (<-chan struct{}, error) {
	if err := q.begin(ctx, OpSubscribe); err != nil {
		return nil, err
	}
	if !q.f.NativeNotify {
		return nil, q.wrap(OpSubscribe, fmt.Errorf("%w: %s has no native notify", ErrUnsupported, q.f.Name))
	}
	ch, err := q.d.Subscribe(ctx)
	if err != nil {
		return nil, q.classified(OpSubscribe, err)
	}
	return ch, nil
}

// begin refuses a call on a closed queue or with a context that has ended.
func (q *Queue) begin(ctx context.Context, op Op) error {
	if q.closed.Load() {
		return q.reject(op, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return q.reject(op, err)
	}
	return nil
}

// reject wraps an error found before the backend was called (never
// transient: a bad argument stays bad, and an ended context is the
// caller's choice), and tells the observers of a call that was not billed.
func (q *Queue) reject(op Op, err error) error {
	err = q.wrap(op, err)
	for _, o := range q.opts.observers {
		o.Observe(Call{Queue: q.name, Op: op, Err: err, Rejected: true})
	}
	return err
}

// fail wraps and classifies an error the driver returned, and tells the
// observers of the failed call. An error of a call whose context had ended
// is not transient (the caller gave up), except a put's transient error
// that is not the context's own error (a driver's own request timeout
// is not the caller's cancel): its request was sent and then failed (a
// reply lost, a connection dropped), so the messages may be stored, and
// only a transient error says so (Put: "an error means nothing was
// written, except a transient error").
func (q *Queue) fail(ctx context.Context, op Op, n int, err error) error {
	e := q.classified(op, err)
	if cerr := ctx.Err(); cerr != nil && !(e.transient && (op == OpPut || op == OpPutBatch) && !errors.Is(err, cerr)) {
		e.transient = false // the caller's context ended: the caller gave up
	}
	q.observe(op, n, e)
	return e
}

// wrap names the driver, operation and queue in an error of the queue's
// own (a bad argument, an unsupported operation): never transient.
func (q *Queue) wrap(op Op, err error) error {
	return &opError{prefix: q.prefix(op), err: err}
}

// classified wraps a driver's error with the driver's classification,
// without telling the observers.
func (q *Queue) classified(op Op, err error) *opError {
	t, after := q.d.Classify(err)
	return &opError{prefix: q.prefix(op), err: err, transient: t, retryAfter: after}
}

func (q *Queue) prefix(op Op) string {
	return q.f.Name + ": " + op.String() + " " + strconv.Quote(q.name) + ": "
}

func (q *Queue) observe(op Op, n int, err error) { q.observeSize(op, n, 0, err) }

// observeSize tells the observers of a call that moved size bytes of
// message bodies, billed as Units requests where the backend bills by
// payload (Features.BillingChunk).
func (q *Queue) observeSize(op Op, n, size int, err error) {
	units := 1
	if c := q.f.BillingChunk; c > 0 && size > c {
		units = (size + c - 1) / c
	}
	for _, o := range q.opts.observers {
		o.Observe(Call{Queue: q.name, Op: op, Messages: n, Units: units, Err: err})
	}
}

// opError is an error of a Queue's call: the driver's error, named, with
// the driver's classification.
type opError struct {
	prefix     string
	err        error
	transient  bool
	retryAfter time.Duration
}

func (e *opError) Error() string             { return e.prefix + e.err.Error() }
func (e *opError) Unwrap() error             { return e.err }
func (e *opError) Transient() bool           { return e.transient }
func (e *opError) RetryAfter() time.Duration { return e.retryAfter }

// Op is an operation of a Queue, as Observers see it.
type Op int

// The operations. OpDeleteBatch is one backend call that deleted many.
const (
	OpPut Op = iota
	OpGet
	OpDelete
	OpDeleteBatch
	OpUpdate
	OpPeek
	OpCount
	OpClear
	OpSibling
	OpSubscribe
	// OpPutBatch is one backend call that stored many messages (a
	// driver.PutBatcher's).
	OpPutBatch
)

var opNames = []string{"put", "get", "delete", "delete batch", "update visibility", "peek", "count", "clear", "sibling", "subscribe", "put batch"}

// String names the operation as errors do.
func (o Op) String() string {
	if o >= 0 && int(o) < len(opNames) {
		return opNames[o]
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// Observer sees every call a Queue makes to its backend: how the cost meter
// (package meter) counts billed transactions and metrics count errors.
// Observe is called on the caller's goroutine after the call and must not
// block.
type Observer interface {
	Observe(Call)
}

// Call is one call of a Queue, as an Observer sees it.
type Call struct {
	// Queue is the queue's name and Op the operation.
	Queue string
	Op    Op
	// Messages counts what the call moved: 1 for a put, delete or update,
	// the messages a get or peek returned, those a batch put stored or a
	// batch delete deleted,
	// the count a Count returned.
	Messages int
	// Units is how many requests the backend bills the call as: 1, or
	// more where it bills by payload (Features.BillingChunk: SQS bills
	// each 64 KiB of bodies a put sends or a get returns as one request).
	// 0 means 1.
	Units int
	// Err is the call's error, nil on success.
	Err error
	// Rejected is set for a call refused before it reached the backend (a
	// bad argument, a closed queue, an ended context): not billed.
	Rejected bool
}

// checkVisibility validates the visibility timeout of a Get: it must be
// positive and at most MaxVisibilityTimeout.
func checkVisibility(d time.Duration) error {
	if d <= 0 || d > MaxVisibilityTimeout {
		return fmt.Errorf("%w: visibility timeout %s is outside (0, %s]", ErrInvalidArgument, d, MaxVisibilityTimeout)
	}
	return nil
}

// checkUpdateVisibility validates the duration of an UpdateVisibility:
// 0 (release now) to MaxVisibilityTimeout.
func checkUpdateVisibility(d time.Duration) error {
	if d < 0 || d > MaxVisibilityTimeout {
		return fmt.Errorf("%w: visibility timeout %s is outside [0, %s]", ErrInvalidArgument, d, MaxVisibilityTimeout)
	}
	return nil
}

// CheckPut validates a Put against a body limit and returns the effective
// TTL (DefaultTTL for zero; NoExpiry kept as is).
func CheckPut(body []byte, opts PutOptions, maxBody int) (ttl time.Duration, err error) {
	if len(body) > maxBody {
		return 0, fmt.Errorf("%w: body of %d bytes is over the limit of %d", ErrTooLarge, len(body), maxBody)
	}
	ttl = opts.TTL
	switch {
	case ttl == 0:
		ttl = DefaultTTL
	case ttl < 0 && ttl != NoExpiry:
		return 0, fmt.Errorf("%w: ttl %s is negative (use queue.NoExpiry to keep a message forever)", ErrInvalidArgument, ttl)
	}
	d := opts.InitialVisibilityDelay
	if d < 0 || d > MaxVisibilityTimeout {
		return 0, fmt.Errorf("%w: initial visibility delay %s is outside [0, %s]", ErrInvalidArgument, d, MaxVisibilityTimeout)
	}
	if ttl != NoExpiry && d >= ttl {
		return 0, fmt.Errorf("%w: initial visibility delay %s is not shorter than ttl %s", ErrInvalidArgument, d, ttl)
	}
	return ttl, nil
}

// ExpiresAt is now+ttl, the zero time for NoExpiry, saturating far in the
// future instead of overflowing.
func ExpiresAt(now time.Time, ttl time.Duration) time.Time {
	if ttl == NoExpiry {
		return time.Time{}
	}
	t := now.Add(ttl)
	if t.Before(now) {
		return time.Time{}
	}
	return t
}

// Clock is the time source a driver reads. Drivers take one as an option so
// tests and the simulator can run them in virtual time; the default is the
// wall clock.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }
