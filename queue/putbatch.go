package queue

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/adaptq/adaptq/queue/driver"
)

// PutMessage is one message of a PutBatch: a body and its options, as Put
// takes them.
type PutMessage struct {
	Body []byte
	Opts PutOptions
}

// PutResult is what became of one message of a PutBatch: its id, or the
// error that Put would have returned for it (ID is then empty).
type PutResult struct {
	ID  string
	Err error
}

// errBatchReply: a driver answered a batch put with a different number of
// results than messages sent, or with an empty id. The call's outcome is
// unknown for every message of it.
var errBatchReply = errors.New("the driver's answer does not match the batch")

// putBatchParallel is how many Puts PutBatch keeps in flight where the
// driver has no batch put (Azure): a get's worth, as DeleteBatch's
// fallback.
const putBatchParallel = MaxBatchSize

// PutBatch puts many messages with as few backend calls as the driver
// allows and returns one result per message, in order. Where the driver
// stores many in one call (driver.PutBatcher: memory, SQLite in one
// transaction, PostgreSQL in one statement, Redis in one script, SQS's
// SendMessageBatch), each call takes up to Features().MaxBatch messages
// (and Features().MaxBatchBytes of bodies, where set, metadata included
// where Features().Metadata.InBody); other drivers
// (Azure) get one Put per message, up to 32 at once.
//
// Each message is checked as Put checks one: a body over the limit, a bad
// option or metadata over Features().Metadata's limits fails that message
// alone (ErrTooLarge, ErrInvalidArgument, a *MetadataError; naming the
// message's place in the batch, the field and its value), it is not
// written, and the others still go. Metadata is stored with its message
// as Put stores it. A message whose result holds
// an error was not written, except, as for Put, a transient error from a
// network backend that could not know (a reply lost after sending): the
// message may then be stored, and a retry may store it twice. Failures are
// per message and never hidden: a backend call that fails as a whole
// reports its error for each message it carried, and the messages of the
// other calls keep their own results.
//
// err is for a call refused as a whole (a closed queue, a context that
// had ended): results is then nil and nothing was written. A context that
// ends midway fails the messages not yet sent with its error.
//
// A wrapper (WithWrapper) that embeds the driver hides its batch put, as
// it hides UpdateVisibilityBatch's: PutBatch then makes one Put per
// message, each a billed call. Observers see each backend call: OpPutBatch
// with the messages it stored, billed by its bodies' size where the
// backend bills by payload (SQS: one request per 64 KiB).
//
// Under a Tracer (package tracing) the call is one put of len(msgs)
// messages: one span, whose trace context goes into a copy of each
// message's metadata where it fits the backend's limits (a message never
// fails for tracing's sake; msgs is never changed), ended with the
// results (BatchPutSpan).
func (q *Queue) PutBatch(ctx context.Context, msgs []PutMessage) (results []PutResult, err error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	if q.tracer != nil {
		return q.tracedPutBatch(ctx, msgs)
	}
	return q.putBatch(ctx, msgs, nil)
}

// putBatch is PutBatch, the trace context of span (nil: none) added to
// each message's metadata where it fits.
func (q *Queue) putBatch(ctx context.Context, msgs []PutMessage, span PutSpan) (results []PutResult, err error) {
	if err := q.begin(ctx, OpPutBatch); err != nil {
		return nil, err
	}
	results = make([]PutResult, len(msgs))
	reqs := make([]driver.PutRequest, 0, len(msgs))
	idx := make([]int, 0, len(msgs)) // reqs[k] is msgs[idx[k]]
	for i, m := range msgs {
		o, err := q.checkPut(m.Body, m.Opts)
		if err != nil {
			results[i].Err = q.reject(OpPutBatch, fmt.Errorf("message %d of %d: %w", i, len(msgs), err))
			continue
		}
		reqs = append(reqs, driver.PutRequest{Body: m.Body, Opts: q.inject(span, m.Body, o)})
		idx = append(idx, i)
	}
	if len(reqs) == 0 {
		return results, nil
	}
	pb, ok := q.d.(driver.PutBatcher)
	if !ok {
		q.putEach(ctx, reqs, idx, results)
		return results, nil
	}
	for start := 0; start < len(reqs); {
		end := q.chunkEnd(reqs, start)
		if cerr := ctx.Err(); cerr != nil {
			cerr = q.reject(OpPutBatch, cerr)
			for k := start; k < len(reqs); k++ {
				results[idx[k]].Err = cerr
			}
			break
		}
		q.putChunk(ctx, pb, reqs[start:end], idx[start:end], results)
		start = end
	}
	return results, nil
}

// chunkEnd is the end of the chunk of reqs that starts at start: at most
// MaxBatch requests and MaxBatchBytes of bodies, with their metadata where
// it counts against the message size (Metadata.InBody: SQS sends it as
// attributes within the call's payload), at least one request.
func (q *Queue) chunkEnd(reqs []driver.PutRequest, start int) int {
	end := min(start+q.f.MaxBatch, len(reqs))
	if lim := q.f.MaxBatchBytes; lim > 0 {
		size := 0
		for k := start; k < end; k++ {
			size += len(reqs[k].Body)
			if md := q.f.Metadata; md.InBody {
				size += driver.MetadataSize(reqs[k].Opts.Metadata, md.PairOverhead)
			}
			if size > lim && k > start {
				return k
			}
		}
	}
	return end
}

// putChunk stores one chunk with one call of the driver's batch put.
func (q *Queue) putChunk(ctx context.Context, pb driver.PutBatcher, reqs []driver.PutRequest, idx []int, results []PutResult) {
	ids, res, err := pb.PutBatch(ctx, reqs)
	if err == nil && (len(ids) != len(reqs) || len(res) != len(reqs)) {
		err = driver.Transient(fmt.Errorf("%w: %d ids and %d results for %d messages", errBatchReply, len(ids), len(res), len(reqs)), 0)
	}
	if err != nil {
		err = q.fail(ctx, OpPutBatch, 0, err)
		for _, i := range idx {
			results[i].Err = err
		}
		return
	}
	size, stored := 0, 0
	for k, r := range reqs {
		size += len(r.Body)
		i := idx[k]
		switch {
		case res[k] != nil:
			results[i].Err = q.classified(OpPutBatch, fmt.Errorf("message %d: %w", i, res[k]))
		case ids[k] == "":
			results[i].Err = q.classified(OpPutBatch, driver.Transient(fmt.Errorf("message %d: %w: no id", i, errBatchReply), 0))
		default:
			results[i].ID = ids[k]
			stored++
		}
	}
	q.observeSize(OpPutBatch, stored, size, nil)
}

// putEach puts reqs one call each, up to putBatchParallel at once, for a
// driver without a batch put.
func (q *Queue) putEach(ctx context.Context, reqs []driver.PutRequest, idx []int, results []PutResult) {
	var g errgroup.Group
	g.SetLimit(putBatchParallel)
	for k, r := range reqs {
		i := idx[k]
		g.Go(func() error {
			if err := ctx.Err(); err != nil {
				results[i].Err = q.reject(OpPut, err)
				return nil
			}
			results[i].ID, results[i].Err = q.put(ctx, r.Body, r.Opts)
			return nil
		})
	}
	_ = g.Wait() // every func returns nil: the results are per message
}
