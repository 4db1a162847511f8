// Package driver is what a queue backend implements for adaptq: the raw
// operations of one queue and a Features description of what the backend
// can do. Programs never call a driver. They hold the portable *queue.Queue,
// which does once, for every backend, what each driver would otherwise
// repeat: argument checks, the closed state, metering, the batch-delete
// fallback and error wrapping and classification. The split is the one of
// database/sql and database/sql/driver, or go-cloud's pubsub and
// pubsub/driver.
//
// # What a driver may assume
//
// The portable queue calls a driver only with valid arguments, on a queue
// that is not closed, with a context that was live when the call began:
//
//   - Get's n is 1..Features.MaxBatch and its visibility in
//     (0, MaxVisibilityTimeout]; UpdateVisibility's d is in
//     [0, MaxVisibilityTimeout].
//   - Put's body is at most Features.MaxBody bytes; its TTL is resolved
//     (NoExpiry or positive, never 0) and its delay is in [0, TTL). A
//     PutBatcher's PutBatch gets 1 to Features.MaxBatch requests, each
//     checked as Put's, their bodies within Features.MaxBatchBytes in all
//     where that is set (a single request may exceed it).
//   - DeleteBatch is called only when Features.BatchDelete, with 1 to
//     Features.MaxBatch receipts, an id possibly twice; the slice is the
//     caller's, to read during the call and neither change nor keep; Peek only when
//     Features.MaxPeek > 0, with n in 1..MaxPeek; Subscribe only when
//     Features.NativeNotify; Sibling only when Features.Siblings, with a
//     name that passes the naming rules.
//
// # What a driver returns
//
// Errors that wrap this package's sentinels for the outcomes of the contract
// (ErrReceiptMismatch, ErrNotFound …), without a prefix naming the driver,
// operation or queue: the portable queue adds that. Classify says which
// other errors a retry may cure; DefaultClassify covers what every backend
// shares (network timeouts and resets, errors marked with Transient).
//
// A driver is done when package queuetest's conformance suite passes against
// the real backend.
package driver

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"
)

// Queue is one named queue on one backend. A driver returns it from the
// function it registers with queue.Register (or from its own constructor),
// and the portable queue.Queue wraps it. Implementations are safe for
// concurrent use.
//
// Every method is required, so a wrapper that embeds a Queue (fault or
// latency injection, tracing) forwards every capability; Features says
// which of the optional operations the backend really has.
type Queue interface {
	// Name is the queue's name.
	Name() string
	// Features describes the backend. It does not change while the queue
	// is open.
	Features() Features

	// Put stores a message and returns its id.
	Put(ctx context.Context, body []byte, opts PutOptions) (id string, err error)
	// Get hides up to n visible messages for visibility and returns them,
	// each with a new pop receipt and its dequeue count incremented; oldest
	// first where the backend keeps an order. An empty queue returns no
	// messages and no error.
	Get(ctx context.Context, n int, visibility time.Duration) ([]*Message, error)
	// Delete removes a message held with its newest receipt: a stale
	// receipt is ErrReceiptMismatch, an id that is gone ErrNotFound.
	Delete(ctx context.Context, id, popReceipt string) error
	// DeleteBatch deletes many messages in one backend call and returns one
	// result per receipt, in order (nil, ErrReceiptMismatch or ErrNotFound,
	// as Delete would), or err for a failure of the whole call, in which
	// case nothing was deleted. A receipt whose id came earlier in the list
	// finds its message gone. Drivers without Features.BatchDelete return
	// ErrUnsupported.
	DeleteBatch(ctx context.Context, receipts []Receipt) (results []error, err error)
	// UpdateVisibility hides a held message for d from now (0: visible at
	// once) and returns its new receipt; the old one becomes stale.
	UpdateVisibility(ctx context.Context, id, popReceipt string, d time.Duration) (newReceipt string, err error)
	// Peek returns up to n visible messages without hiding them or changing
	// receipts or dequeue counts. Drivers without Features.MaxPeek return
	// ErrUnsupported.
	Peek(ctx context.Context, n int) ([]*Message, error)
	// Count is the number of messages, visible or hidden: exact or
	// approximate as Features.ExactCount says.
	Count(ctx context.Context) (int, error)
	// Clear deletes every message of the queue.
	Clear(ctx context.Context) error

	// Sibling opens the queue called name on the same backend (the same
	// file, account or server): how a worker opens a poison queue without a
	// URL of its own. Drivers without Features.Siblings return
	// ErrUnsupported.
	Sibling(ctx context.Context, name string) (Queue, error)
	// Subscribe returns a channel that receives soon after a message is put
	// to this queue, by this process or any other, until ctx ends; signals
	// that arrive while one is pending merge. Drivers without
	// Features.NativeNotify return ErrUnsupported.
	Subscribe(ctx context.Context) (<-chan struct{}, error)

	// Classify says whether a retry of a call that failed with err may
	// succeed, and how long the backend asked the caller to wait first (0
	// for no hint).
	Classify(err error) (transient bool, retryAfter time.Duration)
	// As sets target to the driver's own client or handle if target is a
	// pointer to its type, and reports whether it did (go-cloud's As).
	As(target any) bool
	// Close releases what the queue holds. The messages stay.
	Close() error
}

// Features describe a backend: the limits the portable queue checks
// arguments against, the capabilities it may use, and what the listener
// and the cost meter need to know.
type Features struct {
	// Name names the driver in errors and reports ("sqlite").
	Name string
	// MaxBatch is the most messages one Get returns, 1..32 (Azure 32, SQS
	// 10). The listener asks for min(batch size, MaxBatch).
	MaxBatch int
	// MaxPeek is the most messages one Peek shows; 0 if the backend cannot
	// peek.
	MaxPeek int
	// MaxBody is the largest message body in bytes.
	MaxBody int
	// ExactCount is set when Count is exact; otherwise it is approximate
	// (Azure's ApproximateMessagesCount may count expired messages for a
	// while).
	ExactCount bool
	// BatchDelete is set when DeleteBatch deletes many messages in one
	// backend call. Without it the portable queue makes one Delete per
	// message.
	BatchDelete bool
	// Siblings is set when Sibling can open other queues of the backend.
	Siblings bool
	// NativeNotify is set when Subscribe wakes consumers after a put, from
	// any process, with no push trigger of adaptq's own.
	NativeNotify bool
	// Durability is what an acknowledged Put survives.
	Durability Durability
	// Billed is set when every call is a billed transaction (a cloud
	// service), and PricePer10k is then its price in US dollars per
	// 10,000 calls (0: unknown). Embedded and self-hosted backends cost
	// nothing per call, so a consumer may favour latency over calls.
	Billed      bool
	PricePer10k float64
	// TimeResolution is the granularity of the backend's timestamps and
	// timeouts (Azure: one second); 0 means exact.
	TimeResolution time.Duration

	// LongPoll is the longest a Get may wait on the server for a message
	// to arrive on an empty queue, in one call (SQS's WaitTimeSeconds: 20
	// s); 0 if the backend cannot. The portable queue's GetWait hands the
	// wait to the driver's Get in the context (see Wait); the listener
	// spends its idle waits that way instead of sleeping.
	LongPoll time.Duration
	// LaxReceipts is set when the backend cannot tell a stale receipt or a
	// message that is gone (SQS): Delete and DeleteBatch with such a
	// receipt succeed without deleting anything, UpdateVisibility keeps
	// the receipt (the old one stays valid) and refuses a stale one or a
	// deleted message with ErrReceiptMismatch or ErrNotFound, either. A
	// stale receipt still never deletes or hides what another consumer
	// holds.
	LaxReceipts bool
	// ServerPoison is set when the backend itself moves a message that was
	// received too often to a dead-letter queue (an SQS queue with a
	// RedrivePolicy): the listener then leaves poison messages to it and
	// moves none to adaptq's poison queue.
	ServerPoison bool
	// BillingChunk is the payload the backend bills as one request (SQS:
	// each 64 KiB of a call's payload is one request); 0 when a call is
	// one request whatever its size.
	BillingChunk int
	// BusyTasks is how many dequeue tasks a listener left to its default
	// pool (Options.Tasks 0) runs while its gets come back full: a backend
	// whose concurrent gets overlap their round trips and share their
	// commits (PostgreSQL's group commit) drains faster with several; 0 or
	// 1 keeps one (an embedded database with one writer gains nothing, a
	// billed backend pays for every get).
	BusyTasks int
	// Metadata bounds a message's metadata; zero when the driver stores
	// none (the portable queue then refuses any).
	Metadata MetadataLimits
	// MaxBatchBytes bounds the bodies one PutBatch of a PutBatcher carries
	// in all, in bytes, with their metadata where Metadata.InBody (SQS: a
	// SendMessageBatch's payload is at most 1 MiB, encoding and attributes
	// included); 0: no bound but MaxBatch messages.
	MaxBatchBytes int
}

type waitKey struct{}

// WithWait returns ctx carrying a long-poll wait for a driver's Get: how
// long the backend may hold the call open for a message to arrive on an
// empty queue. The portable queue sets it (GetWait) only for drivers with
// Features.LongPoll, never above it.
func WithWait(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, waitKey{}, d)
}

// Wait is the long-poll wait ctx carries (see WithWait); 0 for none: Get
// returns at once.
func Wait(ctx context.Context) time.Duration {
	d, _ := ctx.Value(waitKey{}).(time.Duration)
	return max(d, 0)
}

// VisibilityBatcher is a capability a driver may have beyond Queue (found
// with a type assertion, as io.WriterTo is by io.Copy): changing the
// visibility of many held messages in one backend call (SQS's
// ChangeMessageVisibilityBatch). The portable queue's UpdateVisibilityBatch
// calls it with 1 to Features.MaxBatch receipts and d in [0,
// MaxVisibilityTimeout]; it returns one new receipt and one result per
// receipt, in order (as UpdateVisibility would), or err for a failure of
// the whole call. A wrapper that embeds the driver hides it; the portable
// queue then updates the messages one call each.
type VisibilityBatcher interface {
	UpdateVisibilityBatch(ctx context.Context, receipts []Receipt, d time.Duration) (newReceipts []string, results []error, err error)
}

// Durability is what an acknowledged Put survives.
type Durability int

const (
	// InProcess: the messages live in the process and die with it.
	InProcess Durability = iota
	// ServerMemory: the messages survive the crash of a worker, not a
	// restart of the server that holds them (Redis without persistence).
	ServerMemory
	// ProcessCrash: the messages are on disk and survive a process crash,
	// not a power cut (SQLite in WAL mode with synchronous=NORMAL).
	ProcessCrash
	// PowerLoss: the messages are synced to disk before Put returns and
	// survive a power cut.
	PowerLoss
	// Replicated: a managed service keeps replicas (Azure, SQS).
	Replicated
)

var durabilityNames = []string{"in-process", "server-memory", "process-crash", "power-loss", "replicated"}

// String is the durability's stable name.
func (d Durability) String() string {
	if d >= 0 && int(d) < len(durabilityNames) {
		return durabilityNames[d]
	}
	return "unknown"
}

// Message is one message as a driver returns it; the portable queue hands
// it to its caller as a queue.Message (the same fields, without a copy).
// Get fills every field, Peek all but PopReceipt.
type Message struct {
	ID            string
	PopReceipt    string
	Body          []byte
	DequeueCount  int
	InsertedAt    time.Time
	ExpiresAt     time.Time // zero for NoExpiry
	NextVisibleAt time.Time
	Metadata      map[string]string // nil for none
}

// PutOptions are a Put's resolved options: TTL is NoExpiry or positive,
// InitialVisibilityDelay in [0, TTL).
type PutOptions struct {
	TTL                    time.Duration
	InitialVisibilityDelay time.Duration
	// Metadata is the message's string map, nil for none; the driver
	// stores it beside the body and returns it with the message (Get and
	// Peek). The map is the caller's: read it during the call, never keep
	// or change it.
	Metadata map[string]string
}

// PutRequest is one message of a PutBatch: its body and resolved options,
// under the same rules as Put's.
type PutRequest struct {
	Body []byte
	Opts PutOptions
}

// PutBatcher is a capability a driver may have beyond Queue (found with a
// type assertion, as VisibilityBatcher is): storing many messages in one
// backend call or transaction. The portable queue's PutBatch calls it
// with 1 to the driver's batch limit of requests (Features.MaxBatch, and
// bodies of Features.MaxBatchBytes in all where that is set), each already checked as
// Put checks one; it returns one id and one result per request, in order
// (a message whose result is non-nil was not written), or err for a
// failure of the whole call, in which case nothing was written (or, for a
// network backend that cannot know, err is transient and may have been
// written, as Put's). Drivers without it get bounded parallel Puts. The
// slice and its bodies are the caller's, to read during the call and
// neither change nor keep. A wrapper that embeds the driver hides it (as
// it hides VisibilityBatcher): the portable queue then puts one message a
// call; a wrapper that means to keep it implements PutBatcher itself and
// forwards.
type PutBatcher interface {
	PutBatch(ctx context.Context, reqs []PutRequest) (ids []string, results []error, err error)
}

// NoExpiry as PutOptions.TTL keeps a message until it is deleted.
const NoExpiry time.Duration = -1

// Receipt names one held message: what a delete needs.
type Receipt struct {
	ID         string
	PopReceipt string
}

// The contract's errors. Package queue exports the same values, so callers
// match them with errors.Is against queue.ErrNotFound and the like.
var (
	// ErrReceiptMismatch: the pop receipt is not the newest for the
	// message, which timed out and was got again by someone else.
	ErrReceiptMismatch = errors.New("queue: pop receipt mismatch")
	// ErrNotFound: no message with this id (deleted, expired, or never
	// there).
	ErrNotFound = errors.New("queue: message not found")
	// ErrBatchSize: a Get or Peek asked for fewer than 1 or more than the
	// driver's maximum.
	ErrBatchSize = errors.New("queue: batch size out of range")
	// ErrTooLarge: the body is over the driver's limit.
	ErrTooLarge = errors.New("queue: message too large")
	// ErrInvalidName: the queue name breaks the naming rules.
	ErrInvalidName = errors.New("queue: invalid queue name")
	// ErrInvalidArgument: a duration or other argument is out of range.
	ErrInvalidArgument = errors.New("queue: invalid argument")
	// ErrInvalidURL: a queue URL that cannot be used.
	ErrInvalidURL = errors.New("queue: invalid queue URL")
	// ErrClosed: the queue or its backend was closed.
	ErrClosed = errors.New("queue: closed")
	// ErrUnsupported: the backend does not have the operation (see
	// Features).
	ErrUnsupported = errors.New("queue: not supported by this backend")
)

// transientError marks an error that a retry may cure.
type transientError struct {
	err        error
	retryAfter time.Duration
}

func (e *transientError) Error() string             { return e.err.Error() }
func (e *transientError) Unwrap() error             { return e.err }
func (e *transientError) Transient() bool           { return true }
func (e *transientError) RetryAfter() time.Duration { return e.retryAfter }

// Transient marks err as one a retry may cure (a timeout, a busy server, a
// locked database); retryAfter is the server's hint, or 0 for none.
// Transient(nil, …) is nil.
func Transient(err error, retryAfter time.Duration) error {
	if err == nil {
		return nil
	}
	return &transientError{err: err, retryAfter: retryAfter}
}

// DefaultClassify is the classification every backend shares: errors marked
// with Transient (or with a Transient() bool method), network timeouts,
// refused and reset connections and unexpected EOFs are transient; a
// cancelled context is not (the caller gave up). The retry hint is the one
// marked on err (a RetryAfter() time.Duration method), if any.
func DefaultClassify(err error) (transient bool, retryAfter time.Duration) {
	if err == nil || errors.Is(err, context.Canceled) {
		return false, 0
	}
	var r interface{ RetryAfter() time.Duration }
	if errors.As(err, &r) {
		retryAfter = max(r.RetryAfter(), 0)
	}
	var t interface{ Transient() bool }
	if errors.As(err, &t) {
		return t.Transient(), retryAfter
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true, retryAfter
	}
	switch {
	case errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.ErrUnexpectedEOF):
		return true, retryAfter
	}
	return false, retryAfter
}

// DepthReader is a capability a driver may have beyond Queue (found with a
// type assertion, as VisibilityBatcher is): telling the visible messages
// from those in flight, and how old the oldest is, in one cheap call. The
// portable queue's Depth uses it, else falls back to Count. A wrapper that
// embeds the driver hides it.
type DepthReader interface {
	Depth(ctx context.Context) (Depth, error)
}

// Depth is a queue's depth as a DepthReader reads it: exact or approximate
// as Features.ExactCount says. Expired messages are not counted.
type Depth struct {
	// Visible messages a Get would return now.
	Visible int
	// InFlight messages are hidden: got and not yet deleted, or put with an
	// initial visibility delay that has not run out.
	InFlight int
	// Oldest is when the oldest message (visible or not) was put; zero for
	// an empty queue or a backend that cannot tell cheaply.
	Oldest time.Time
}

// PeekPager is a capability a driver may have beyond Queue (found with a
// type assertion, as VisibilityBatcher is): peeking page by page. PeekAfter
// returns up to n (1..Features.MaxPeek) visible messages that come after
// the message whose id is after ("" for the first), in an order that does
// not change while they wait: the order they were put (the embedded
// backends' ids grow). Like Peek, it hides nothing and changes no receipt
// or dequeue count; a message that became visible again after a Get may
// appear before after and so not on a later page. after is an id the
// driver gave (an id it never gives is ErrInvalidArgument); it need not
// exist any more. The poison tools page a listing with it, so that one
// page costs calls bounded by its size. A wrapper that embeds the driver
// hides it.
type PeekPager interface {
	PeekAfter(ctx context.Context, after string, n int) ([]*Message, error)
}
