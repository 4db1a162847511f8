package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/adaptq/adaptq/queue/driver"
)

var _ driver.PutBatcher = (*redisQueue)(nil)

// errResendExpired is the result of a message of a batch whose first send
// may have stored it, and whose TTL ran out before a send again could say.
var errResendExpired = errors.New("the batch's reply was lost and the message's TTL ran out before it could be sent again: it may or may not have been stored")

// PutBatch stores the messages in one script (putBatchScript), each under
// an id it chooses, and sets the wake-up marker once. It sends the batch
// again after a lost reply as Put sends a put (DefaultAttempts in all,
// none started putResendWindow after the first, each message's TTL and
// delay less the time spent): the script writes a message only if no
// earlier send left it or its tombstone, so each message is stored once,
// under the id PutBatch returns, and a late send neither resets a message
// a consumer holds nor brings back one it deleted. A message whose TTL ran
// out before a send again is left out of it, and its result is a
// transient error: it may or may not be stored. An error of the whole
// call after every attempt is transient and means the same for every
// message; a retry by the caller is a new put with new ids.
func (q *redisQueue) PutBatch(ctx context.Context, reqs []driver.PutRequest) ([]string, []error, error) {
	n := len(reqs)
	sweep := 0
	if after := q.c.puts.Add(uint64(n)); after/putSweepEvery != (after-uint64(n))/putSweepEvery {
		sweep = putSweep
	}
	start := q.c.monoNow()
	until := start.Add(putResendWindow)
	wall := wallNow()
	out := make([]string, n)
	for i := range out {
		out[i] = ids.newID(wall)
	}
	now := q.c.now()
	metas := make([][]byte, n) // nil: sent as ""
	for i, r := range reqs {
		metas[i] = driver.EncodeMetadata(r.Opts.Metadata)
	}
	first := true
	var sent []int // the messages of the latest send, in its order
	v, err := q.againWith(ctx, putBatchScript, q.keys3, until, func() []any {
		var spent time.Duration
		if !first && now == "" {
			// A send again on the server's clock: reckon from the first.
			spent = q.c.monoNow().Sub(start)
		}
		first = false
		args := make([]any, 0, 2+5*n)
		args = append(args, sweep, now)
		sent = sent[:0]
		for i, r := range reqs {
			ttl, delay := r.Opts.TTL, r.Opts.InitialVisibilityDelay
			expires := ttl != driver.NoExpiry
			if spent > 0 {
				if expires && ttl <= spent {
					continue // past its TTL: send it no more
				}
				if expires {
					ttl -= spent
				}
				delay -= spent
			}
			args = append(args, putFields(out[i], r.Body, ttl, delay, expires, metas[i])...)
			sent = append(sent, i)
		}
		if len(sent) == 0 {
			return nil
		}
		return args
	})
	if err != nil {
		return nil, nil, err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2*len(sent) {
		return nil, nil, fmt.Errorf("unexpected reply to a batch put: %T of %d for %d messages", v, len(a), len(sent))
	}
	results := make([]error, n)
	answered := make([]bool, n)
	for k, i := range sent {
		if got, _ := a[2*k].(string); got != out[i] {
			return nil, nil, fmt.Errorf("unexpected reply to a batch put: id %q, sent %q", got, out[i])
		}
		answered[i] = true
	}
	for i := range results {
		if !answered[i] {
			results[i] = driver.Transient(errResendExpired, 0)
			out[i] = ""
		}
	}
	return out, results, nil
}

// putFields are one message's arguments of putScript and putBatchScript:
// id, body, TTL in µs (-1: none), delay in µs, metadata (EncodeMetadata's;
// nil is sent as "": none).
func putFields(id string, body []byte, ttl, delay time.Duration, expires bool, meta []byte) []any {
	t := int64(-1)
	if expires {
		t = us(ttl)
	}
	return []any{id, body, t, us(delay), meta}
}
