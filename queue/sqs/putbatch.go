package sqs

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

var _ driver.PutBatcher = (*Queue)(nil)

// PutBatch sends up to MaxBatch messages with one SendMessageBatch (the
// portable queue keeps their bodies and metadata within
// Features().MaxBatchBytes, so that the call fits SQS's total size), each
// encoded as Put encodes one, its metadata as message attributes.
// SQS answers per entry: a refused entry's result is what Put would have
// returned (ErrTooLarge for one over the queue's size, a permanent error
// for another fault of the sender, a transient one otherwise), and an
// entry SQS neither stored nor refused is a transient error (its outcome
// unknown). Like every call here it is sent once: a batch whose answer was
// lost fails as a whole with a transient error, and its messages may or
// may not be stored (SQS has no idempotent send on standard queues), as
// Put's.
func (q *Queue) PutBatch(ctx context.Context, reqs []driver.PutRequest) ([]string, []error, error) {
	if err := q.live(); err != nil {
		return nil, nil, err
	}
	ids := make([]string, len(reqs))
	results := make([]error, len(reqs))
	entries := make([]types.SendMessageBatchRequestEntry, 0, len(reqs))
	for i, r := range reqs {
		m, err := encode(r.Body, r.Opts)
		if err != nil {
			results[i] = err
			continue
		}
		entries = append(entries, types.SendMessageBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), MessageBody: m.body, MessageAttributes: m.attrs, DelaySeconds: m.delay,
		})
	}
	if len(entries) == 0 {
		return ids, results, nil
	}
	rctx, cancel, serr := q.c.sending(ctx)
	if serr != nil {
		return nil, nil, serr
	}
	defer cancel()
	out, err := q.c.api.SendMessageBatch(rctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(q.url), Entries: entries})
	if err != nil {
		return nil, nil, classify(rctx, "SendMessageBatch", q.name, err)
	}
	answered := make(map[int]bool, len(entries))
	for _, s := range out.Successful {
		i, ok := entryIndex(s.Id, len(reqs))
		if !ok {
			continue
		}
		answered[i] = true
		if s.MessageId == nil || *s.MessageId == "" {
			results[i] = queue.Transient(&Error{Op: "SendMessageBatch", Queue: q.name, Message: "stored, but the answer holds no message id", err: errors.New("no message id")}, 0)
			continue
		}
		ids[i] = *s.MessageId
	}
	sent := make([]*string, len(entries))
	for k, en := range entries {
		sent[k] = en.Id
	}
	q.batchFailed("SendMessageBatch", "no result for the entry: it may or may not be stored", out.Failed, sent, answered, results, func(_ int, e *Error) error {
		switch {
		case hasCode(e.Code, []string{"InvalidParameterValue"}) && strings.Contains(e.Message, "shorter than"):
			e.kind = queue.ErrTooLarge
			return e
		case hasCode(e.Code, []string{"InvalidMessageContents"}):
			e.kind = queue.ErrInvalidArgument
			return e
		}
		return nil
	})
	return ids, results, nil
}
