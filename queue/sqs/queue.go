package sqs

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.uber.org/zap"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// SQS's limits and prices.
const (
	// MaxBatch is the most messages one ReceiveMessage returns, and the
	// most entries of a DeleteMessageBatch or ChangeMessageVisibilityBatch.
	MaxBatch = 10
	// LongPoll is the longest WaitTimeSeconds of a ReceiveMessage.
	LongPoll = 20 * time.Second
	// MaxVisibility is the longest a message can be hidden: 12 hours from
	// its receive.
	MaxVisibility = 12 * time.Hour
	// MaxDelay is the longest DelaySeconds of a SendMessage: 15 minutes.
	MaxDelay = 15 * time.Minute
	// PricePer10k is the price of 10,000 requests in US dollars: $0.40 per
	// million for standard queues (AWS's price list, first tier after the
	// free million), which Features reports for the cost meter.
	PricePer10k = 0.004
	// BillingChunk is the payload SQS bills as one request: "each 64 KB
	// chunk of a payload is billed as 1 request".
	BillingChunk = 64 << 10
	// attrReserve is what the driver's own message attributes may take of
	// the message size (names, types and values: under 64 bytes).
	attrReserve = 256
)

// MetadataLimits are SQS's for a message's metadata, sent as message
// attributes of type String: 10 attributes a message, less the driver's
// own two (AttrEncoding, AttrTTL); names up to 256 characters; and every
// attribute's name, type and value count against the message size, so
// body and metadata together must fit Features().MaxBody. Values are
// bounded as on the other engines.
var MetadataLimits = driver.MetadataLimits{
	MaxPairs: 8, MaxKey: driver.MaxMetadataKey, MaxValue: driver.DefaultMetadataValue,
	InBody: true, PairOverhead: len("String"),
}

// Message attributes the driver writes. Other producers may leave them
// out: a body without adaptq-encoding is text, one without adaptq-ttl
// lives as long as the queue keeps messages.
const (
	// AttrEncoding is "base64" for a body sent in base64 (one that is not
	// text of SQS's characters within the Basic Multilingual Plane:
	// bytes that are not UTF-8, control characters, emoji), "empty" for
	// an empty body (sent as "-"). A consumer that does not use adaptq
	// decodes the body when it finds "base64" here.
	AttrEncoding = "adaptq-encoding"
	// AttrTTL is the message's time-to-live in milliseconds.
	AttrTTL = "adaptq-ttl"
)

// Queue is the driver of one SQS queue (a driver.Queue), safe for
// concurrent use. Programs hold the portable *queue.Queue that wraps it, and
// reach this type with its As.
type Queue struct {
	c          *Client
	name       string
	url        string
	maxMessage int
	redrive    string
	log        *zap.Logger

	onClose func() error // releases a client shared by URL opens
}

var _ driver.Queue = (*Queue)(nil)

func newQueue(c *Client, name, url string) *Queue {
	return &Queue{c: c, name: name, url: url, maxMessage: MaxMessageSize, log: c.cfg.Logger.With(zap.String("queue", name))}
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// URL returns the queue's SQS URL.
func (q *Queue) URL() string { return q.url }

// Client returns the client the queue is on.
func (q *Queue) Client() *Client { return q.c }

// RedrivePolicy is the queue's own RedrivePolicy (JSON), read when it was
// opened; empty if it has none. With one, SQS moves poison messages
// itself (Features().ServerPoison).
func (q *Queue) RedrivePolicy() string { return q.redrive }

// Features: SQS's limits (10 a receive, no peek), batch deletes, long
// polling, lax receipts, billed calls by 64 KiB chunks, approximate
// counts, one-second timeouts.
func (q *Queue) Features() driver.Features {
	return driver.Features{
		Name:           Scheme,
		MaxBatch:       MaxBatch,
		MaxBody:        q.maxBody(),
		MaxBatchBytes:  q.maxBatchBytes(),
		BatchDelete:    true,
		Siblings:       true,
		Durability:     driver.Replicated,
		Billed:         true,
		PricePer10k:    PricePer10k,
		TimeResolution: time.Second,
		LongPoll:       LongPoll,
		LaxReceipts:    true,
		ServerPoison:   q.redrive != "",
		BillingChunk:   BillingChunk,
		Metadata:       MetadataLimits,
	}
}

// maxBody is the largest body that fits a message of the queue's
// MaximumMessageSize whatever its bytes: one that is not text travels in
// base64, four bytes for three.
func (q *Queue) maxBody() int { return (q.maxMessage - attrReserve) / 4 * 3 }

// maxBatchBytes bounds the bodies of one PutBatch, with their metadata
// (MetadataLimits.InBody: the portable queue counts it with each body), so
// that its SendMessageBatch fits the queue's MaximumMessageSize in all
// (SQS: "the maximum total payload size (the sum of the individual lengths
// of all of the batched messages)" is the message limit) whatever their
// bytes: each body may go in base64, with its padding and the driver's
// attributes; metadata goes as it is, so counting it as body bytes is
// within the bound.
func (q *Queue) maxBatchBytes() int { return (q.maxMessage - MaxBatch*(attrReserve+4)) / 4 * 3 }

// Classify reads the marks classify put on the driver's errors.
func (q *Queue) Classify(err error) (bool, time.Duration) { return driver.DefaultClassify(err) }

// As gives the queue itself to a *(*Queue) target, its *Client to a
// *(*Client), and the SDK's client to a *(*sqs.Client) of the SDK.
func (q *Queue) As(target any) bool {
	switch p := target.(type) {
	case **Queue:
		*p = q
	case **Client:
		*p = q.c
	case **awssqs.Client:
		*p = q.c.api
	default:
		return false
	}
	return true
}

// Peek is not supported: SQS cannot show a message without receiving it.
func (q *Queue) Peek(context.Context, int) ([]*driver.Message, error) {
	return nil, driver.ErrUnsupported
}

// Subscribe is not supported: SQS has no push. Long polling (GetWait) is
// how a consumer waits for messages.
func (q *Queue) Subscribe(context.Context) (<-chan struct{}, error) {
	return nil, driver.ErrUnsupported
}

// Sibling opens another queue of the same client (for a poison queue).
func (q *Queue) Sibling(ctx context.Context, name string) (driver.Queue, error) {
	if q.onClose != nil {
		q.c.refs.Add(1)
	}
	s, err := q.c.open(ctx, name)
	if err != nil {
		if q.onClose != nil {
			_ = q.c.release()
		}
		return nil, err
	}
	if q.onClose != nil {
		s.onClose = q.c.release
	}
	return s, nil
}

// Close releases the handle (and the client, if the queue was opened by
// URL and is the last one on it).
func (q *Queue) Close() error {
	if q.onClose != nil {
		return q.onClose()
	}
	return nil
}

// live refuses a call of a queue whose Client was closed (Client.Close:
// "queues opened on it then return queue.ErrClosed"): nothing reaches SQS
// and nothing is billed.
func (q *Queue) live() error {
	if q.c.closed.Load() {
		return fmt.Errorf("the client was closed: %w", queue.ErrClosed)
	}
	return nil
}

// seconds rounds d up to whole seconds, SQS's resolution, so a message is
// never hidden or delayed for less than asked.
func seconds(d time.Duration) int32 {
	return int32((d + time.Second - 1) / time.Second)
}

// isText reports whether b goes to SQS as it is: not empty, valid UTF-8,
// and only characters of the Basic Multilingual Plane that SQS allows
// (#x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD). SQS also takes
// #x10000 to #x10FFFF (emoji), but emulators refuse them (fauxqs 1.9.2
// and 2.4.1 check UTF-16 code units, so a surrogate pair fails with
// InvalidMessageContents): such a body goes in base64, so that one wire
// format holds on SQS and on its emulators.
func isText(b []byte) bool {
	if len(b) == 0 || !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		switch {
		case r == 0x9, r == 0xA, r == 0xD:
		case r >= 0x20 && r <= 0xD7FF:
		case r >= 0xE000 && r <= 0xFFFD:
		default:
			return false
		}
	}
	return true
}

// Put sends a message. A body that is text goes as it is; any other (and
// an empty one) in base64, marked with AttrEncoding.
func (q *Queue) Put(ctx context.Context, body []byte, opts driver.PutOptions) (string, error) {
	if err := q.live(); err != nil {
		return "", err
	}
	m, err := encode(body, opts)
	if err != nil {
		return "", err
	}
	in := &awssqs.SendMessageInput{QueueUrl: aws.String(q.url), MessageBody: m.body, MessageAttributes: m.attrs, DelaySeconds: m.delay}
	rctx, cancel, serr := q.c.sending(ctx)
	if serr != nil {
		return "", serr
	}
	defer cancel()
	out, err := q.c.api.SendMessage(rctx, in)
	if err != nil {
		return "", classify(rctx, "SendMessage", q.name, err)
	}
	if out.MessageId == nil {
		return "", errors.New("SendMessage: the response holds no message id")
	}
	return *out.MessageId, nil
}

// encoded is one message as SendMessage and SendMessageBatch send it.
type encoded struct {
	body  *string
	attrs map[string]types.MessageAttributeValue // nil for none
	delay int32
}

// encode is what Put and PutBatch send for one message: the body as it is
// if it is text, else (and when empty) in base64, marked with
// AttrEncoding; the TTL in AttrTTL; the delay in whole seconds; the
// metadata as String attributes.
func encode(body []byte, opts driver.PutOptions) (encoded, error) {
	var m encoded
	attrs := map[string]types.MessageAttributeValue{}
	switch {
	case isText(body):
		m.body = aws.String(string(body))
	case len(body) == 0:
		m.body = aws.String("-")
		attrs[AttrEncoding] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("empty")}
	default:
		m.body = aws.String(base64.StdEncoding.EncodeToString(body))
		attrs[AttrEncoding] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("base64")}
	}
	if opts.TTL != driver.NoExpiry {
		ms := max(opts.TTL.Milliseconds(), 1)
		attrs[AttrTTL] = types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(ms, 10))}
	}
	if d := opts.InitialVisibilityDelay; d > 0 {
		if d > MaxDelay {
			return m, fmt.Errorf("%w: initial visibility delay %s is over SQS's %s", queue.ErrInvalidArgument, d, MaxDelay)
		}
		m.delay = seconds(d)
	}
	for k, v := range opts.Metadata {
		attrs[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	if len(attrs) > 0 {
		m.attrs = attrs
	}
	return m, nil
}

// Get receives up to n messages, each hidden for visibility rounded up to
// whole seconds (at most MaxVisibility). With a wait in ctx (the portable
// queue's GetWait) it is a long poll of that many whole seconds. Messages
// past their TTL by SQS's clock (the answer's Date) are deleted and left
// out.
func (q *Queue) Get(ctx context.Context, n int, visibility time.Duration) ([]*driver.Message, error) {
	if err := q.live(); err != nil {
		return nil, err
	}
	if visibility > MaxVisibility {
		return nil, fmt.Errorf("%w: visibility timeout %s is over SQS's %s", queue.ErrInvalidArgument, visibility, MaxVisibility)
	}
	wait := min(driver.Wait(ctx), LongPoll)
	in := &awssqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(q.url),
		MaxNumberOfMessages:         int32(n),
		VisibilityTimeout:           seconds(visibility),
		WaitTimeSeconds:             int32(wait / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameSentTimestamp, types.MessageSystemAttributeNameApproximateReceiveCount},
		MessageAttributeNames:       []string{"All"}, // the driver's own and the metadata
	}
	rctx, cancel := q.c.ctx(ctx, wait)
	defer cancel()
	out, err := q.c.api.ReceiveMessage(rctx, in)
	if err != nil {
		return nil, classify(rctx, "ReceiveMessage", q.name, err)
	}
	local := q.c.cfg.Clock.Now()
	now, judged := serverNow(out.ResultMetadata)
	hidden := time.Duration(in.VisibilityTimeout) * time.Second
	ms := make([]*driver.Message, 0, len(out.Messages))
	var expired []string
	for _, sm := range out.Messages {
		if sm.MessageId == nil || sm.ReceiptHandle == nil {
			continue
		}
		m := &driver.Message{ID: *sm.MessageId, NextVisibleAt: local.Add(hidden)}
		if v, err := strconv.ParseInt(sm.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
			m.InsertedAt = time.UnixMilli(v).UTC()
		}
		if v, err := strconv.Atoi(sm.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]); err == nil {
			m.DequeueCount = v
		}
		if a, ok := sm.MessageAttributes[AttrTTL]; ok && a.StringValue != nil && !m.InsertedAt.IsZero() {
			if ttl, err := strconv.ParseInt(*a.StringValue, 10, 64); err == nil && ttl > 0 {
				m.ExpiresAt = m.InsertedAt.Add(time.Duration(ttl) * time.Millisecond)
			}
		}
		if judged && expiredAt(m.ExpiresAt, now) {
			expired = append(expired, *sm.ReceiptHandle)
			continue
		}
		m.Body = decodeBody(aws.ToString(sm.Body), sm.MessageAttributes[AttrEncoding].StringValue)
		m.Metadata = metadata(sm.MessageAttributes)
		m.PopReceipt = joinReceipt(m.ExpiresAt, q.name, *sm.ReceiptHandle)
		ms = append(ms, m)
	}
	if len(expired) > 0 {
		q.deleteExpired(context.WithoutCancel(ctx), expired)
	}
	return ms, nil
}

// metadata is a message's attributes but the driver's own: those of type
// String or Number (and their custom subtypes), as text; Binary ones are
// left out. Nil for none.
func metadata(attrs map[string]types.MessageAttributeValue) map[string]string {
	var md map[string]string
	for k, a := range attrs {
		if a.StringValue == nil || strings.HasPrefix(strings.ToLower(k), driver.ReservedMetadataPrefix) {
			continue
		}
		if t := aws.ToString(a.DataType); !strings.HasPrefix(t, "String") && !strings.HasPrefix(t, "Number") {
			continue
		}
		if md == nil {
			md = make(map[string]string, len(attrs))
		}
		md[k] = *a.StringValue
	}
	return md
}

// decodeBody reverses Put's encoding.
func decodeBody(s string, enc *string) []byte {
	switch aws.ToString(enc) {
	case "base64":
		if b, err := base64.StdEncoding.DecodeString(s); err == nil {
			return b
		}
	case "empty":
		return []byte{}
	}
	return []byte(s)
}

// deleteExpired deletes messages that SQS's clock put past their TTL: they
// are gone for the contract, and SQS would keep them until its retention
// period.
func (q *Queue) deleteExpired(ctx context.Context, handles []string) {
	entries := make([]types.DeleteMessageBatchRequestEntry, len(handles))
	for i, h := range handles {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h)}
	}
	rctx, cancel := q.c.ctx(ctx, 0)
	defer cancel()
	if _, err := q.c.api.DeleteMessageBatch(rctx, &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(q.url), Entries: entries}); err != nil {
		q.log.Debug("sqs: deleting expired messages failed; they come back and are dropped again", zap.Int("messages", len(handles)), zap.Error(err))
	}
}

// A pop receipt is the message's expiry (Unix milliseconds of SQS's clock,
// 0 for none), the queue's name and SQS's receipt handle, joined by '|':
// enough to refuse a receipt of another queue without a request, and to
// tell, by the Date of SQS's answer to a delete or a visibility change,
// whether the message's TTL had ended.
func joinReceipt(expires time.Time, name, handle string) string {
	var ms int64
	if !expires.IsZero() {
		ms = expires.UnixMilli()
	}
	return strconv.FormatInt(ms, 10) + "|" + name + "|" + handle
}

type receipt struct {
	expires time.Time
	handle  string
}

// parseReceipt checks a pop receipt against the queue: one that is
// malformed or of another queue names no message here (ErrNotFound).
func (q *Queue) parseReceipt(s string) (receipt, error) {
	parts := strings.SplitN(s, "|", 3)
	if len(parts) != 3 || parts[2] == "" {
		return receipt{}, fmt.Errorf("%w: malformed pop receipt", queue.ErrNotFound)
	}
	ms, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return receipt{}, fmt.Errorf("%w: malformed pop receipt", queue.ErrNotFound)
	}
	if parts[1] != q.name {
		return receipt{}, fmt.Errorf("%w: the pop receipt is of queue %q", queue.ErrNotFound, parts[1])
	}
	r := receipt{handle: parts[2]}
	if ms > 0 {
		r.expires = time.UnixMilli(ms)
	}
	return r, nil
}

var errExpired = fmt.Errorf("%w: the message's time-to-live has ended", queue.ErrNotFound)

// Delete deletes a held message. SQS cannot tell a stale receipt or a
// message that is gone (Features().LaxReceipts): such a delete succeeds
// and deletes nothing. A message past its TTL by SQS's clock is deleted
// and reported ErrNotFound.
func (q *Queue) Delete(ctx context.Context, id, popReceipt string) error {
	if err := q.live(); err != nil {
		return err
	}
	r, err := q.parseReceipt(popReceipt)
	if err != nil {
		return err
	}
	rctx, cancel, serr := q.c.sending(ctx)
	if serr != nil {
		return serr
	}
	defer cancel()
	out, err := q.c.api.DeleteMessage(rctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(q.url), ReceiptHandle: aws.String(r.handle)})
	if err != nil {
		return deleteError(classify(rctx, "DeleteMessage", q.name, err))
	}
	if now, ok := serverNow(out.ResultMetadata); ok && expiredAt(r.expires, now) {
		return errExpired
	}
	return nil
}

// entryIndex is the index of the receipt a batch result's Id names (the
// driver numbers a batch's entries by their receipts' indexes), if it
// names one.
func entryIndex(id *string, n int) (int, bool) {
	i, err := strconv.Atoi(aws.ToString(id))
	return i, err == nil && i >= 0 && i < n
}

// batchFailed records a batch call's failed entries in results (and in
// answered), then marks every sent entry that the answer left out
// transient with missing: it may or may not have been acted on. known
// gives the result of a failure it recognises (entry i, the service's
// error), nil for one it does not: a sender fault then stays permanent,
// anything else is transient.
func (q *Queue) batchFailed(op, missing string, failed []types.BatchResultErrorEntry, sent []*string, answered map[int]bool, results []error, known func(i int, e *Error) error) {
	for _, f := range failed {
		i, ok := entryIndex(f.Id, len(results))
		if !ok {
			continue
		}
		answered[i] = true
		e := &Error{Op: op, Queue: q.name, Code: aws.ToString(f.Code), Message: firstLine(aws.ToString(f.Message)), err: errors.New(aws.ToString(f.Code))}
		switch r := known(i, e); {
		case r != nil:
			results[i] = r
		case f.SenderFault:
			results[i] = e
		default:
			results[i] = queue.Transient(e, 0)
		}
	}
	for _, id := range sent {
		if i, ok := entryIndex(id, len(results)); ok && !answered[i] {
			results[i] = queue.Transient(&Error{Op: op, Queue: q.name, Message: missing, err: errors.New("no result")}, 0)
		}
	}
}

// deleteError maps a delete's failures that mean "no such message here"
// to ErrNotFound.
func deleteError(err error) error {
	if errors.Is(err, queue.ErrReceiptMismatch) || errors.Is(err, ErrQueueNotFound) {
		return fmt.Errorf("%w: %w", queue.ErrNotFound, err)
	}
	return err
}

// DeleteBatch deletes up to MaxBatch messages with one DeleteMessageBatch.
func (q *Queue) DeleteBatch(ctx context.Context, receipts []driver.Receipt) ([]error, error) {
	if err := q.live(); err != nil {
		return nil, err
	}
	results := make([]error, len(receipts))
	parsed := make([]receipt, len(receipts))
	entries := make([]types.DeleteMessageBatchRequestEntry, 0, len(receipts))
	for i, rc := range receipts {
		r, err := q.parseReceipt(rc.PopReceipt)
		if err != nil {
			results[i] = err
			continue
		}
		parsed[i] = r
		entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(r.handle)})
	}
	if len(entries) == 0 {
		return results, nil
	}
	rctx, cancel, serr := q.c.sending(ctx)
	if serr != nil {
		return nil, serr
	}
	defer cancel()
	out, err := q.c.api.DeleteMessageBatch(rctx, &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(q.url), Entries: entries})
	if err != nil {
		return nil, deleteError(classify(rctx, "DeleteMessageBatch", q.name, err))
	}
	now, judged := serverNow(out.ResultMetadata)
	answered := make(map[int]bool, len(entries))
	for _, s := range out.Successful {
		i, ok := entryIndex(s.Id, len(receipts))
		if !ok {
			continue
		}
		answered[i] = true
		if judged && expiredAt(parsed[i].expires, now) {
			results[i] = errExpired
		}
	}
	sent := make([]*string, len(entries))
	for k, en := range entries {
		sent[k] = en.Id
	}
	q.batchFailed("DeleteMessageBatch", "no result for the entry", out.Failed, sent, answered, results, func(_ int, e *Error) error {
		if hasCode(e.Code, codesReceipt) {
			e.kind = queue.ErrNotFound
			return e
		}
		return nil
	})
	return results, nil
}

// UpdateVisibility hides a held message for d from now (rounded up to
// whole seconds; 0 releases it) and returns its receipt: SQS keeps the
// receipt handle (Features().LaxReceipts). A stale receipt or a deleted
// message is ErrReceiptMismatch (SQS cannot tell which); a message that
// SQS's answer shows past its TTL is deleted and reported ErrNotFound.
func (q *Queue) UpdateVisibility(ctx context.Context, id, popReceipt string, d time.Duration) (string, error) {
	if err := q.live(); err != nil {
		return "", err
	}
	r, err := q.parseReceipt(popReceipt)
	if err != nil {
		return "", err
	}
	if d > MaxVisibility {
		return "", fmt.Errorf("%w: visibility timeout %s is over SQS's %s", queue.ErrInvalidArgument, d, MaxVisibility)
	}
	rctx, cancel, serr := q.c.sending(ctx)
	if serr != nil {
		return "", serr
	}
	defer cancel()
	out, err := q.c.api.ChangeMessageVisibility(rctx, &awssqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(q.url), ReceiptHandle: aws.String(r.handle), VisibilityTimeout: seconds(d),
	})
	if err != nil {
		err = classify(rctx, "ChangeMessageVisibility", q.name, err)
		if errors.Is(err, ErrQueueNotFound) {
			return "", fmt.Errorf("%w: %w", queue.ErrNotFound, err)
		}
		if now, ok := serverNowOf(err); ok && errors.Is(err, queue.ErrReceiptMismatch) && expiredAt(r.expires, now) {
			return "", errExpired
		}
		return "", err
	}
	if now, ok := serverNow(out.ResultMetadata); ok && expiredAt(r.expires, now) {
		q.deleteExpired(context.WithoutCancel(ctx), []string{r.handle})
		return "", errExpired
	}
	return popReceipt, nil
}

// Count is SQS's ApproximateNumberOfMessages plus
// ApproximateNumberOfMessagesNotVisible (in flight) plus
// ApproximateNumberOfMessagesDelayed: visible and hidden messages, and
// expired ones until a Get drops them.
func (q *Queue) Count(ctx context.Context) (int, error) {
	visible, hidden, err := q.counts(ctx)
	return visible + hidden, err
}

var _ driver.DepthReader = (*Queue)(nil)

// Depth is Count's one GetQueueAttributes call, its numbers apart
// (driver.DepthReader): ApproximateNumberOfMessages are visible,
// …NotVisible and …Delayed in flight. SQS tells the oldest message's age
// only to CloudWatch.
func (q *Queue) Depth(ctx context.Context) (driver.Depth, error) {
	visible, hidden, err := q.counts(ctx)
	return driver.Depth{Visible: visible, InFlight: hidden}, err
}

// counts reads the queue's approximate visible and hidden (not visible or
// delayed) messages in one billed call. An answer without one of the
// three attributes, or with one that is not a count, is an error.
func (q *Queue) counts(ctx context.Context) (visible, hidden int, err error) {
	if err := q.live(); err != nil {
		return 0, 0, err
	}
	rctx, cancel := q.c.ctx(ctx, 0)
	defer cancel()
	names := []types.QueueAttributeName{
		types.QueueAttributeNameApproximateNumberOfMessages,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
	}
	out, err := q.c.api.GetQueueAttributes(rctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(q.url), AttributeNames: names})
	if err != nil {
		return 0, 0, classify(rctx, "GetQueueAttributes", q.name, err)
	}
	for i, a := range names {
		// An attribute left out (or not a number) is an unknown depth,
		// never 0: a scale-to-zero signal would stop the workers of a
		// queue with a backlog.
		s, ok := out.Attributes[string(a)]
		if !ok {
			return 0, 0, fmt.Errorf("sqs: GetQueueAttributes of queue %q answered without %s: the depth is unknown", q.name, a)
		}
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return 0, 0, fmt.Errorf("sqs: GetQueueAttributes of queue %q answered %s = %q, not a count: the depth is unknown", q.name, a, s)
		}
		if i == 0 {
			visible += v
		} else {
			hidden += v
		}
	}
	return visible, hidden, nil
}

// Clear is SQS's PurgeQueue. SQS allows one a minute per queue (a second
// is transient, with PurgeInterval as the hint) and may take up to a
// minute to finish, deleting messages sent meanwhile too.
func (q *Queue) Clear(ctx context.Context) error {
	if err := q.live(); err != nil {
		return err
	}
	rctx, cancel, serr := q.c.sending(ctx)
	if serr != nil {
		return serr
	}
	defer cancel()
	_, err := q.c.api.PurgeQueue(rctx, &awssqs.PurgeQueueInput{QueueUrl: aws.String(q.url)})
	return classify(rctx, "PurgeQueue", q.name, err)
}

var _ driver.VisibilityBatcher = (*Queue)(nil)

// UpdateVisibilityBatch changes the visibility of up to MaxBatch held
// messages with one ChangeMessageVisibilityBatch (the portable queue's
// UpdateVisibilityBatch: releases at shutdown, in batches). Each result is
// what UpdateVisibility would return.
func (q *Queue) UpdateVisibilityBatch(ctx context.Context, receipts []driver.Receipt, d time.Duration) ([]string, []error, error) {
	if err := q.live(); err != nil {
		return nil, nil, err
	}
	if d > MaxVisibility {
		return nil, nil, fmt.Errorf("%w: visibility timeout %s is over SQS's %s", queue.ErrInvalidArgument, d, MaxVisibility)
	}
	newReceipts := make([]string, len(receipts))
	results := make([]error, len(receipts))
	parsed := make([]receipt, len(receipts))
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, 0, len(receipts))
	for i, rc := range receipts {
		r, err := q.parseReceipt(rc.PopReceipt)
		if err != nil {
			results[i] = err
			continue
		}
		parsed[i] = r
		entries = append(entries, types.ChangeMessageVisibilityBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(r.handle), VisibilityTimeout: seconds(d),
		})
	}
	if len(entries) == 0 {
		return newReceipts, results, nil
	}
	rctx, cancel, serr := q.c.sending(ctx)
	if serr != nil {
		return nil, nil, serr
	}
	defer cancel()
	out, err := q.c.api.ChangeMessageVisibilityBatch(rctx, &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(q.url), Entries: entries})
	if err != nil {
		err = classify(rctx, "ChangeMessageVisibilityBatch", q.name, err)
		if errors.Is(err, ErrQueueNotFound) {
			err = fmt.Errorf("%w: %w", queue.ErrNotFound, err)
		}
		return nil, nil, err
	}
	now, judged := serverNow(out.ResultMetadata)
	var expired []string
	answered := make(map[int]bool, len(entries))
	for _, s := range out.Successful {
		i, ok := entryIndex(s.Id, len(receipts))
		if !ok {
			continue
		}
		answered[i] = true
		if judged && expiredAt(parsed[i].expires, now) {
			results[i] = errExpired
			expired = append(expired, parsed[i].handle)
			continue
		}
		newReceipts[i] = receipts[i].PopReceipt
	}
	sent := make([]*string, len(entries))
	for k, en := range entries {
		sent[k] = en.Id
	}
	q.batchFailed("ChangeMessageVisibilityBatch", "no result for the entry", out.Failed, sent, answered, results, func(i int, e *Error) error {
		if hasCode(e.Code, codesReceipt) || hasCode(e.Code, []string{"InvalidParameterValue"}) && strings.Contains(e.Message, "ReceiptHandle") {
			e.kind = queue.ErrReceiptMismatch
			if judged && expiredAt(parsed[i].expires, now) {
				return errExpired
			}
			return e
		}
		return nil
	})
	if len(expired) > 0 {
		q.deleteExpired(context.WithoutCancel(ctx), expired)
	}
	return newReceipts, results, nil
}
