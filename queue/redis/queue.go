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
		BusyTasks:      BusyTasks,
		Metadata:       driver.DefaultMetadataLimits,
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

// run sends a script once. The Client's go-redis client should not retry
// it either (Options.MaxRetries -1, as the URL's clients have): a script
// whose reply was lost may have run.
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

// again sends an idempotent script (one that sent twice acts once, or
// changes nothing) up to DefaultAttempts times while it fails transiently,
// pausing as go-redis would between its own retries. It starts no attempt
// after until (the zero time: no bound), read on the process's monotonic
// clock.
func (q *redisQueue) again(ctx context.Context, s *goredis.Script, keys []string, until time.Time, args ...any) (any, error) {
	return q.againWith(ctx, s, keys, until, func() []any { return args })
}

// againWith is again with the arguments of each attempt after the first
// from next, which returns nil to send no more. Once an attempt failed
// transiently (its request may have reached the server, and may still, late
// in the network), the call's outcome is unknown: a later attempt's error
// that is not transient (a full server, a closed Client, an ended context)
// is then returned as the first transient one, which it names, so that no
// caller takes the call for one that did nothing.
func (q *redisQueue) againWith(ctx context.Context, s *goredis.Script, keys []string, until time.Time, next func() []any) (any, error) {
	var unsure error // the first transient failure
	fail := func(err error) error {
		if unsure == nil || err == unsure {
			return err
		}
		if t, _ := Classify(err); t {
			return err
		}
		return fmt.Errorf("%w (its outcome unknown; sent again: %v)", unsure, err)
	}
	args := next()
	for attempt := 1; ; attempt++ {
		v, err := q.run(ctx, s, keys, args...)
		if err == nil {
			return v, nil
		}
		t, _ := Classify(err)
		if t && unsure == nil {
			unsure = err
		}
		if !t || attempt >= DefaultAttempts || ctx.Err() != nil {
			return nil, fail(err)
		}
		timer := time.NewTimer(min(retryMinBackoff<<(attempt-1), retryMaxBackoff))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, fail(err)
		case <-timer.C:
		}
		if !until.IsZero() && q.c.monoNow().After(until) {
			return nil, fail(err)
		}
		if args = next(); args == nil {
			return nil, fail(err)
		}
	}
}

// us is d in whole microseconds, rounded up so that a positive duration
// never becomes zero.
func us(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// Put stores a message under an id it chooses (a ULID, id.go) and sets the
// queue's wake-up marker. The script writes the message only if no message
// has that id and no delete left the id's tombstone, so Put can send it
// again when its reply was lost (up to DefaultAttempts in all, none started
// putResendWindow after the first): the message is stored once, under the
// id Put returns, and a send that arrives after a consumer got the message
// or deleted it (a send again, or a first send late in the network) changes
// nothing. A send again on the server's clock asks for the TTL and the
// initial visibility delay less the time since the first send started, so
// that a message it stores expires no later than the first send's would
// have (and no send goes once the TTL is over): a send again after the
// message expired, and a consumer's delete of it found it gone and left no
// tombstone, would otherwise store it again for a whole new TTL, to be
// handled twice. An error after every attempt is transient and means the
// message may or may not be stored; a retry by the caller is a new put with
// a new id.
func (q *redisQueue) Put(ctx context.Context, body []byte, opts driver.PutOptions) (string, error) {
	expires := opts.TTL != driver.NoExpiry
	sweep := 0
	if q.c.puts.Add(1)%putSweepEvery == 0 {
		sweep = putSweep
	}
	start := q.c.monoNow()
	until := start.Add(putResendWindow)
	id := ids.newID(wallNow())
	now := q.c.now()
	meta := driver.EncodeMetadata(opts.Metadata) // nil: sent as ""
	args := func(ttl, delay time.Duration) []any {
		return append(putFields(id, body, ttl, delay, expires, meta), sweep, now)
	}
	first := true
	v, err := q.againWith(ctx, putScript, q.keys3, until, func() []any {
		if first || now != "" {
			// The first send, or an injected clock: every send carries the
			// first one's time, so the script reckons from it.
			first = false
			return args(opts.TTL, opts.InitialVisibilityDelay)
		}
		spent := q.c.monoNow().Sub(start)
		if expires && opts.TTL <= spent {
			return nil // the message would be past its TTL: send no more
		}
		return args(opts.TTL-spent, opts.InitialVisibilityDelay-spent)
	})
	if err != nil {
		return "", err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return "", fmt.Errorf("unexpected reply %T to put", v)
	}
	if got, _ := a[0].(string); got != id {
		return "", fmt.Errorf("unexpected reply to put: id %q, sent %q", got, id)
	}
	return id, nil
}

// nonce is the random start of the receipts of one call: 64 random bits,
// so that no receipt of one get matches one of another.
func nonce() string {
	return strconv.FormatUint(rand.Uint64(), 36) + "."
}

// Get hides and returns up to n visible messages. Each script drops up to
// sweepChunk expired messages first; when a batch comes back short and the
// sweep stopped at its limit, Get calls again for the rest, so that a large
// expired backlog costs several short scripts, never one that holds the
// server, and never hides the live messages behind it. A script's error
// after some messages were hidden returns those messages (the next call
// meets the error again); a lost reply leaves its messages hidden until
// their visibility timeout, as a get that is not sent again must.
func (q *redisQueue) Get(ctx context.Context, n int, visibility time.Duration) ([]*driver.Message, error) {
	var out []*driver.Message
	for {
		ms, more, err := q.get(ctx, n-len(out), visibility)
		if err != nil {
			if len(out) > 0 {
				return out, nil
			}
			return nil, err
		}
		out = append(out, ms...)
		if !more || len(out) >= n || ctx.Err() != nil {
			return out, nil
		}
	}
}

// get is one script of Get.
func (q *redisQueue) get(ctx context.Context, n int, visibility time.Duration) ([]*driver.Message, bool, error) {
	n = min(n, len(receiptDigits)) // one receipt character each
	rn := nonce()
	v, err := q.run(ctx, getScript, q.keys3, n, us(visibility), rn, sweepChunk, q.c.now())
	if err != nil {
		return nil, false, err
	}
	a, ok := v.([]any)
	if !ok || len(a) < 2 || (len(a)-2)%6 != 0 {
		return nil, false, fmt.Errorf("unexpected reply to get: %T of %d", v, len(a))
	}
	more := toInt(a[1]) == 1
	k := (len(a) - 2) / 6
	if k == 0 {
		return nil, more, nil
	}
	until := time.UnixMicro(toInt(a[0]))
	ms := make([]driver.Message, k)
	out := make([]*driver.Message, k)
	for i := range k {
		f := a[2+6*i : 8+6*i]
		id, _ := f[0].(string)
		body, _ := f[1].(string)
		ms[i] = driver.Message{
			ID:            id,
			PopReceipt:    rn + receiptDigits[i:i+1],
			Body:          []byte(body),
			DequeueCount:  int(toInt(f[2])),
			InsertedAt:    time.UnixMicro(toInt(f[3])),
			ExpiresAt:     expires(toInt(f[4])),
			NextVisibleAt: until,
		}
		if md, ok := f[5].(string); ok {
			if ms[i].Metadata, err = driver.DecodeMetadata([]byte(md)); err != nil {
				return nil, false, err
			}
		}
		out[i] = &ms[i]
	}
	return out, more, nil
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
// receipt. The new receipt is chosen here and the script accepts it as
// done when the message holds it already, so the call is sent again when
// its reply was lost (up to DefaultAttempts in all) and answers as the
// first send would have.
func (q *redisQueue) UpdateVisibility(ctx context.Context, id, popReceipt string, d time.Duration) (string, error) {
	r := nonce() + "u"
	v, err := q.again(ctx, updateScript, q.keys3, time.Time{}, id, popReceipt, us(d), r, q.c.now())
	if err != nil {
		return "", err
	}
	if err := outcome(toInt(v), id); err != nil {
		return "", err
	}
	return r, nil
}

// Peek returns up to n visible messages, oldest first, changing nothing but
// dropping expired messages: each script drops up to sweepChunk of them and
// reads only once none remain, calling again until then.
func (q *redisQueue) Peek(ctx context.Context, n int) ([]*driver.Message, error) {
	for {
		v, err := q.again(ctx, peekScript, q.keys2, time.Time{}, n, sweepChunk, q.c.now())
		if err != nil {
			return nil, err
		}
		a, ok := v.([]any)
		if !ok || len(a) < 1 || (len(a)-1)%7 != 0 {
			return nil, fmt.Errorf("unexpected reply to peek: %T", v)
		}
		if toInt(a[0]) == 1 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			continue
		}
		out := make([]*driver.Message, 0, (len(a)-1)/7)
		for i := 1; i < len(a); i += 7 {
			id, _ := a[i].(string)
			body, _ := a[i+1].(string)
			var md map[string]string
			if m, ok := a[i+6].(string); ok {
				if md, err = driver.DecodeMetadata([]byte(m)); err != nil {
					return nil, err
				}
			}
			out = append(out, &driver.Message{
				Metadata:      md,
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
}

// Count is exact: the sorted set's size less the messages whose TTL has
// passed but that are not swept yet.
func (q *redisQueue) Count(ctx context.Context) (int, error) {
	v, err := q.again(ctx, countScript, q.keys2, time.Time{}, q.c.now())
	if err != nil {
		return 0, err
	}
	return int(toInt(v)), nil
}

// Clear deletes every message, clearChunk per script, leaving the
// tombstones a delete would.
func (q *redisQueue) Clear(ctx context.Context) error {
	for {
		v, err := q.run(ctx, clearScript, q.keys3, clearChunk, q.c.now())
		if err != nil {
			return err
		}
		if toInt(v) == 0 {
			return nil
		}
	}
}
