package queue

import (
	"context"
	"fmt"
	"sync"
	"time"
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
const NoExpiry time.Duration = -1

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
}

// Queue is one named queue on one backend. Implementations are safe for
// concurrent use by many goroutines.
type Queue interface {
	// Name is the queue's name (see ValidateName).
	Name() string

	// Put adds a message and returns its id. A body larger than the driver's
	// limit is ErrTooLarge, and nothing is written. Once Put returns nil the
	// message is stored (durably, on a durable driver). An error means
	// nothing was written, except a transient error from a network backend
	// that cannot know (a timeout after sending): a retry may then store the
	// message twice, which at-least-once consumers tolerate.
	Put(ctx context.Context, body []byte, opts PutOptions) (id string, err error)

	// Get returns up to n visible messages (1 ≤ n ≤ MaxBatchSize, else
	// ErrBatchSize), each now hidden for visibility (0 < visibility ≤
	// MaxVisibilityTimeout) with a fresh PopReceipt and its DequeueCount
	// incremented. An empty queue returns no messages and no error.
	// Messages come oldest first: by the time they became visible, then by
	// when they were put. Embedded drivers keep this order exactly; Azure
	// keeps it approximately, so no consumer may depend on it.
	Get(ctx context.Context, n int, visibility time.Duration) ([]*Message, error)

	// Delete removes a message. It succeeds only with the newest receipt;
	// a stale receipt is ErrReceiptMismatch, an id that is gone ErrNotFound.
	Delete(ctx context.Context, id, popReceipt string) error

	// UpdateVisibility hides a held message for d from now (0 makes it
	// visible at once) and returns the new receipt; the old one is stale.
	UpdateVisibility(ctx context.Context, id, popReceipt string, d time.Duration) (newReceipt string, err error)

	// Peek returns up to n (1..MaxPeek) visible messages without hiding them
	// or changing their receipts or dequeue counts. PopReceipt is empty.
	Peek(ctx context.Context, n int) ([]*Message, error)

	// Count is the approximate number of messages, visible or not (Azure's
	// ApproximateMessagesCount).
	Count(ctx context.Context) (int, error)

	// Clear deletes every message of the queue.
	Clear(ctx context.Context) error

	// Close releases what the queue holds. Messages are not affected.
	Close() error
}

// Receipt names one held message: what Delete needs.
type Receipt struct {
	ID         string
	PopReceipt string
}

// BatchDeleter is implemented by drivers that delete many messages in one
// backend call (one transaction on SQLite). DeleteBatch returns one error
// per receipt, in order (nil where the message was deleted,
// ErrReceiptMismatch or ErrNotFound where it was not), and err for a failure
// of the call itself, in which case nothing was deleted.
//
// Callers should use the package function DeleteBatch, which falls back to
// one Delete per message.
type BatchDeleter interface {
	DeleteBatch(ctx context.Context, receipts []Receipt) (results []error, err error)
}

// SiblingOpener is implemented by queues that can open another queue on
// the same backend (the same file, account, or store): how a worker finds
// a queue's poison queue without a URL of its own. The sibling is closed
// separately.
type SiblingOpener interface {
	Sibling(name string) (Queue, error)
}

// OpenSibling opens the queue called name on q's backend, looking through
// wrappers for a SiblingOpener.
func OpenSibling(q Queue, name string) (Queue, error) {
	for cur := q; cur != nil; {
		if s, ok := cur.(SiblingOpener); ok {
			return s.Sibling(name)
		}
		w, ok := cur.(Wrapper)
		if !ok {
			break
		}
		cur = w.Unwrap()
	}
	return nil, fmt.Errorf("%w: the driver of %q cannot open queue %q beside it", ErrInvalidArgument, q.Name(), name)
}

// MaxBodySizer is implemented by drivers whose body limit is not
// DefaultMaxBodySize.
type MaxBodySizer interface {
	MaxBodySize() int
}

// Wrapper is implemented by queues that wrap another (the cost meter, fault
// injectors). Unwrap returns the wrapped queue, so capabilities can be found
// through wrappers.
type Wrapper interface {
	Unwrap() Queue
}

// MaxBodySize reports q's body limit in bytes.
func MaxBodySize(q Queue) int {
	for q != nil {
		if s, ok := q.(MaxBodySizer); ok {
			return s.MaxBodySize()
		}
		w, ok := q.(Wrapper)
		if !ok {
			break
		}
		q = w.Unwrap()
	}
	return DefaultMaxBodySize
}

// DeleteBatch deletes the messages named by receipts, with one backend call
// if q is a BatchDeleter, else with one Delete each. Results are per receipt,
// in order; err reports a failure of the batch call as a whole.
func DeleteBatch(ctx context.Context, q Queue, receipts []Receipt) (results []error, err error) {
	if len(receipts) == 0 {
		return nil, nil
	}
	if bd, ok := q.(BatchDeleter); ok {
		return bd.DeleteBatch(ctx, receipts)
	}
	return DeleteEach(ctx, q, receipts), nil
}

// DeleteEach deletes receipts with one Delete each, up to MaxBatchSize at
// once, for drivers without a batch delete (Azure bills every delete
// anyway, and a round trip per message one after another would hold a
// consumer back). A receipt whose id came earlier in the list is deleted
// after the earlier one, so results are those of deleting in order: the
// repeat finds its message gone.
func DeleteEach(ctx context.Context, q Queue, receipts []Receipt) []error {
	results := make([]error, len(receipts))
	if len(receipts) == 1 {
		results[0] = q.Delete(ctx, receipts[0].ID, receipts[0].PopReceipt)
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
			results[i] = q.Delete(ctx, r.ID, r.PopReceipt)
		})
	}
	wg.Wait()
	for _, i := range repeats {
		results[i] = q.Delete(ctx, receipts[i].ID, receipts[i].PopReceipt)
	}
	return results
}

// CheckBatchSize returns ErrBatchSize, naming n, unless 1 ≤ n ≤ MaxBatchSize.
func CheckBatchSize(n int) error {
	if n < 1 || n > MaxBatchSize {
		return fmt.Errorf("%w: %d is outside 1..%d", ErrBatchSize, n, MaxBatchSize)
	}
	return nil
}

// CheckPeekSize returns ErrBatchSize, naming n, unless 1 ≤ n ≤ MaxPeek.
func CheckPeekSize(n int) error {
	if n < 1 || n > MaxPeek {
		return fmt.Errorf("%w: peek of %d is outside 1..%d", ErrBatchSize, n, MaxPeek)
	}
	return nil
}

// CheckVisibility validates the visibility timeout of a Get: it must be
// positive and at most MaxVisibilityTimeout.
func CheckVisibility(d time.Duration) error {
	if d <= 0 || d > MaxVisibilityTimeout {
		return fmt.Errorf("%w: visibility timeout %s is outside (0, %s]", ErrInvalidArgument, d, MaxVisibilityTimeout)
	}
	return nil
}

// CheckUpdateVisibility validates the duration of an UpdateVisibility:
// 0 (release now) to MaxVisibilityTimeout.
func CheckUpdateVisibility(d time.Duration) error {
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
