package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// redisQueue is the driver of one queue of a Client.
type redisQueue struct {
	c     *Client
	name  string
	base  string
	keys2 []string // z, x
	keys3 []string // z, x, w
	keys4 []string // z, x, seq, w

	shared string // the shared client's key, for a queue opened by URL
	closed bool
}

var _ driver.Queue = (*redisQueue)(nil)

func (q *redisQueue) Name() string { return q.name }

func (q *redisQueue) Features() driver.Features {
	return driver.Features{
		Name:           "redis",
		MaxBatch:       queue.MaxBatchSize,
		MaxPeek:        queue.MaxPeek,
		MaxBody:        q.c.o.maxBody,
		ExactCount:     true,
		BatchDelete:    true,
		Siblings:       true,
		NativeNotify:   true,
		Durability:     driver.ServerMemory,
		TimeResolution: time.Microsecond,
	}
}

// Sibling opens another queue of the same database. A queue opened by URL
// takes a reference of its own on the shared client.
func (q *redisQueue) Sibling(ctx context.Context, name string) (driver.Queue, error) {
	if q.shared == "" {
		return q.c.queue(name)
	}
	c, err := acquire(ctx, q.shared, nil)
	if err != nil {
		return nil, err
	}
	s, err := c.queue(name)
	if err != nil {
		release(q.shared)
		return nil, err
	}
	s.shared = q.shared
	return s, nil
}

// Close releases the shared client of a queue opened by URL; a queue of a
// Client made with New or Open leaves it to the Client's Close. The
// portable queue calls it once.
func (q *redisQueue) Close() error {
	if q.shared == "" || q.closed {
		return nil
	}
	q.closed = true
	return release(q.shared)
}

// As gives the Client to a *(*Client) target and the go-redis client to a
// *(*goredis.Client) one.
func (q *redisQueue) As(target any) bool {
	switch p := target.(type) {
	case **Client:
		*p = q.c
	case **goredis.Client:
		*p = q.c.rdb
	default:
		return false
	}
	return true
}

func (q *redisQueue) Classify(err error) (bool, time.Duration) { return Classify(err) }

func (q *redisQueue) run(ctx context.Context, s *goredis.Script, keys []string, args ...any) (any, error) {
	if q.c.closed.Load() {
		return nil, queue.ErrClosed
	}
	v, err := s.Run(ctx, q.c.rdb, keys, args...).Result()
	if err != nil {
		return nil, err
	}
	return v, nil
}

// us is d in whole microseconds, rounded up so that a positive duration
// never becomes zero.
func us(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// Put stores a message and sets the queue's wake-up marker.
func (q *redisQueue) Put(ctx context.Context, body []byte, opts driver.PutOptions) (string, error) {
	ttl := int64(-1)
	if opts.TTL != driver.NoExpiry {
		ttl = us(opts.TTL)
	}
	v, err := q.run(ctx, putScript, q.keys4, body, ttl, us(opts.InitialVisibilityDelay), q.c.now())
	if err != nil {
		return "", err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return "", fmt.Errorf("unexpected reply %T to put", v)
	}
	id, _ := a[0].(string)
	return id, nil
}

// nonce is the random start of the receipts of one call: 64 random bits,
// so that no receipt of one get matches one of another.
func nonce() string {
	return strconv.FormatUint(rand.Uint64(), 36) + "."
}

// Get hides and returns up to n visible messages in one script.
func (q *redisQueue) Get(ctx context.Context, n int, visibility time.Duration) ([]*driver.Message, error) {
	rn := nonce()
	v, err := q.run(ctx, getScript, q.keys3, n, us(visibility), rn, q.c.now())
	if err != nil {
		return nil, err
	}
	a, ok := v.([]any)
	if !ok || len(a) < 1 || (len(a)-1)%5 != 0 {
		return nil, fmt.Errorf("unexpected reply to get: %T of %d", v, len(a))
	}
	k := (len(a) - 1) / 5
	if k == 0 {
		return nil, nil
	}
	until := time.UnixMicro(toInt(a[0]))
	ms := make([]driver.Message, k)
	out := make([]*driver.Message, k)
	for i := range k {
		f := a[1+5*i : 6+5*i]
		id, _ := f[0].(string)
		body, _ := f[1].(string)
		ms[i] = driver.Message{
			ID:            id,
			PopReceipt:    rn + strconv.Itoa(i+1),
			Body:          []byte(body),
			DequeueCount:  int(toInt(f[2])),
			InsertedAt:    time.UnixMicro(toInt(f[3])),
			ExpiresAt:     expires(toInt(f[4])),
			NextVisibleAt: until,
		}
		out[i] = &ms[i]
	}
	return out, nil
}

func expires(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us)
}

// toInt reads an integer a script returned as a Lua number or a string
// (a hash field, a sorted set's score).
func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		if n, err := strconv.ParseInt(x, 10, 64); err == nil {
			return n
		}
		f, _ := strconv.ParseFloat(x, 64)
		return int64(f)
	}
	return 0
}

// outcome turns a script's code into the contract's error.
func outcome(code int64, id string) error {
	switch code {
	case 1:
		return nil
	case 0:
		return fmt.Errorf("%w: id %q", queue.ErrNotFound, id)
	case -1:
		return fmt.Errorf("%w: id %q", queue.ErrReceiptMismatch, id)
	}
	return fmt.Errorf("unexpected reply %d for id %q", code, id)
}

// Delete removes a message held with its newest receipt.
func (q *redisQueue) Delete(ctx context.Context, id, popReceipt string) error {
	v, err := q.run(ctx, deleteScript, q.keys2, id, popReceipt, q.c.now())
	if err != nil {
		return err
	}
	return outcome(toInt(v), id)
}

// DeleteBatch deletes up to 32 messages in one script.
func (q *redisQueue) DeleteBatch(ctx context.Context, receipts []driver.Receipt) ([]error, error) {
	args := make([]any, 0, 1+2*len(receipts))
	args = append(args, q.c.now())
	for _, r := range receipts {
		args = append(args, r.ID, r.PopReceipt)
	}
	v, err := q.run(ctx, deleteBatchScript, q.keys2, args...)
	if err != nil {
		return nil, err
	}
	a, ok := v.([]any)
	if !ok || len(a) != len(receipts) {
		return nil, fmt.Errorf("unexpected reply to delete batch: %T for %d receipts", v, len(receipts))
	}
	res := make([]error, len(receipts))
	for i, c := range a {
		res[i] = outcome(toInt(c), receipts[i].ID)
	}
	return res, nil
}

// UpdateVisibility hides a held message for d from now and gives it a new
// receipt.
func (q *redisQueue) UpdateVisibility(ctx context.Context, id, popReceipt string, d time.Duration) (string, error) {
	r := nonce() + "u"
	v, err := q.run(ctx, updateScript, q.keys3, id, popReceipt, us(d), r, q.c.now())
	if err != nil {
		return "", err
	}
	if err := outcome(toInt(v), id); err != nil {
		return "", err
	}
	return r, nil
}

// Peek returns up to n visible messages, oldest first, changing nothing.
func (q *redisQueue) Peek(ctx context.Context, n int) ([]*driver.Message, error) {
	v, err := q.run(ctx, peekScript, q.keys2, n, q.c.now())
	if err != nil {
		return nil, err
	}
	a, ok := v.([]any)
	if !ok || len(a)%6 != 0 {
		return nil, fmt.Errorf("unexpected reply to peek: %T", v)
	}
	out := make([]*driver.Message, 0, len(a)/6)
	for i := 0; i < len(a); i += 6 {
		id, _ := a[i].(string)
		body, _ := a[i+1].(string)
		out = append(out, &driver.Message{
			ID:            id,
			Body:          []byte(body),
			DequeueCount:  int(toInt(a[i+2])),
			InsertedAt:    time.UnixMicro(toInt(a[i+3])),
			ExpiresAt:     expires(toInt(a[i+4])),
			NextVisibleAt: time.UnixMicro(toInt(a[i+5])),
		})
	}
	return out, nil
}

// Count is exact: the sorted set's size less the messages whose TTL has
// passed but that are not swept yet.
func (q *redisQueue) Count(ctx context.Context) (int, error) {
	v, err := q.run(ctx, countScript, q.keys2, q.c.now())
	if err != nil {
		return 0, err
	}
	return int(toInt(v)), nil
}

// Clear deletes every message, clearChunk per script.
func (q *redisQueue) Clear(ctx context.Context) error {
	for {
		v, err := q.run(ctx, clearScript, q.keys3, clearChunk)
		if err != nil {
			return err
		}
		if toInt(v) == 0 {
			return nil
		}
	}
}
