package azure

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// PricePer10k is the price of 10,000 storage transactions in US dollars
// (the 2011 best-practices article: "$0.01 per 10,000 transactions"),
// which Features reports for the cost meter.
const PricePer10k = 0.01

// payloadFetches bounds the claim-check downloads one Get or Peek runs at
// once.
const payloadFetches = 8

// Queue is the driver of one Azure queue (a driver.Queue), safe for
// concurrent use. Programs hold the portable *queue.Queue that wraps it, and
// reach this type with its As (for Sweep and Account).
//
// Azure has no batch delete, so the portable queue's DeleteBatch makes one
// Delete (one billed request) per message, and the cost meter counts each.
type Queue struct {
	a    *Account
	name string
	qc   *azqueue.QueueClient
	log  *zap.Logger

	onClose func() error // releases an account shared by URL opens

	sweepOnce sync.Once
	sweepStop chan struct{}
	sweepDone chan struct{}

	// unreadable is a payload a Get of this handle could not read (its
	// container missing, the blob service failing, access refused): its
	// Gets fail, taking no message, until it can be read (checkPayloads).
	unreadable atomic.Pointer[payloadRef]
}

var _ driver.Queue = (*Queue)(nil)

func newQueue(a *Account, name string) *Queue {
	return &Queue{
		a:    a,
		name: name,
		qc:   a.svc.NewQueueClient(name),
		log:  a.cfg.Logger.With(zap.String("queue", name)),
	}
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// Account returns the account the queue is on.
func (q *Queue) Account() *Account { return q.a }

// Features: Azure's limits, billed calls, no batch delete, no native
// notify, approximate counts, one-second timestamps.
func (q *Queue) Features() driver.Features {
	md := MetadataLimits
	if q.a.claimCheck() {
		// A body over the message goes to a blob and its metadata stays
		// in the message: the envelope counts against the 64 KiB message
		// (Put checks it), not against MaxBody.
		md.InBody = false
	}
	return driver.Features{
		Name:           Scheme,
		MaxBatch:       queue.MaxBatchSize,
		MaxPeek:        queue.MaxPeek,
		MaxBody:        q.maxBodySize(),
		Siblings:       true,
		Durability:     driver.Replicated,
		Billed:         true,
		PricePer10k:    PricePer10k,
		TimeResolution: time.Second,
		Metadata:       md,
	}
}

// Classify reads the marks classify put on the driver's errors.
func (q *Queue) Classify(err error) (bool, time.Duration) { return driver.DefaultClassify(err) }

// As gives the queue itself to a *(*Queue) target, its *Account to a
// *(*Account) target, and the SDK's client to a *(*azqueue.QueueClient).
func (q *Queue) As(target any) bool {
	switch p := target.(type) {
	case **Queue:
		*p = q
	case **Account:
		*p = q.a
	case **azqueue.QueueClient:
		*p = q.qc
	default:
		return false
	}
	return true
}

// Subscribe is not supported: Azure Queue Storage has no push; adaptq's own
// trigger (HTTP) wakes listeners instead.
func (q *Queue) Subscribe(context.Context) (<-chan struct{}, error) {
	return nil, driver.ErrUnsupported
}

// DeleteBatch is not supported: Azure deletes one message per request.
func (q *Queue) DeleteBatch(context.Context, []driver.Receipt) ([]error, error) {
	return nil, driver.ErrUnsupported
}

// maxBodySize is the largest body Put accepts: Config.MaxBodySize with
// claim-check, else what fits in one message (MaxInlineBody with Base64,
// MaxMessageSize with Text).
func (q *Queue) maxBodySize() int {
	if q.a.claimCheck() {
		return q.a.cfg.MaxBodySize
	}
	return min(q.a.cfg.Encoding.inlineLimit(), q.a.cfg.MaxBodySize)
}

// Sibling opens another queue of the same account (for a poison queue).
func (q *Queue) Sibling(ctx context.Context, name string) (driver.Queue, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*q.a.cfg.Timeout+time.Second)
	defer cancel()
	if q.onClose != nil {
		q.a.refs.Add(1)
	}
	s, err := q.a.open(ctx, name)
	if err != nil {
		if q.onClose != nil {
			_ = q.a.release()
		}
		return nil, err
	}
	if q.onClose != nil {
		s.onClose = q.a.release
	}
	return s, nil
}

// Close releases the handle (and the account, if the queue was opened by
// URL and is the last one on it). The portable queue calls it once.
func (q *Queue) Close() error {
	q.stopSweeper()
	if q.onClose != nil {
		return q.onClose()
	}
	return nil
}

// begin checks, for calls that do not come through the portable queue
// (opening, Sweep), the caller's context and the account.
func (q *Queue) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if q.a.closed.Load() {
		return queue.ErrClosed
	}
	return nil
}

// ensure creates the queue, or with NoCreate checks that it exists.
func (q *Queue) ensure(ctx context.Context) error {
	if err := q.begin(ctx); err != nil {
		return err
	}
	if q.a.cfg.NoCreate {
		_, err := q.qc.GetProperties(ctx, nil)
		if err != nil {
			err = classify(ctx, "open", q.name, err)
			if errors.Is(err, ErrQueueNotFound) {
				return fmt.Errorf("%w (create=false: create it first, or allow the driver to)", err)
			}
			return err
		}
		return nil
	}
	return q.create(ctx, "open")
}

// create creates the queue; one that exists already is fine.
func (q *Queue) create(ctx context.Context, op string) error {
	_, err := q.qc.Create(ctx, nil)
	if err != nil {
		err = classify(ctx, op, q.name, err)
		if hasCode(err, "QueueAlreadyExists") {
			return nil
		}
		return err
	}
	return nil
}

// call runs one request. A queue deleted since it was opened is created
// again and the request repeated once, unless NoCreate.
func (q *Queue) call(ctx context.Context, op string, f func() error) error {
	if q.a.closed.Load() {
		return queue.ErrClosed
	}
	err := classify(ctx, op, q.name, f())
	if err != nil && !q.a.cfg.NoCreate && errors.Is(err, ErrQueueNotFound) {
		q.log.Debug("azure: queue was deleted; creating it again", zap.String("op", op))
		if cerr := q.create(ctx, op); cerr != nil {
			return cerr
		}
		err = classify(ctx, op, q.name, f())
	}
	return err
}

// sending is the context a request that changes the queue (put, delete,
// update, clear) is sent on, once the caller's context allows it to start:
// not the caller's, which would abandon the request when the caller gives
// up, though Azure acts on a request it received whether or not its client
// still listens, so a call that returned an error would act afterwards.
// The request runs to its answer, bounded by Config.Timeout, and the call
// returns what it did. Without a timeout (Timeout negative) it is the
// caller's.
func (q *Queue) sending(ctx context.Context) (context.Context, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // nothing sent
	}
	if q.a.cfg.Timeout <= 0 {
		return ctx, nil
	}
	return context.WithoutCancel(ctx), nil
}

// seconds rounds d up to whole seconds, Azure's resolution, so a message is
// never hidden or kept for less than asked.
func seconds(d time.Duration) int32 {
	s := (d + time.Second - 1) / time.Second
	if s > math.MaxInt32 {
		return math.MaxInt32
	}
	return int32(s)
}

// Put adds a message and returns its id. A body over the inline limit is
// stored as a claim-check blob first.
func (q *Queue) Put(ctx context.Context, body []byte, opts driver.PutOptions) (string, error) {
	if q.a.closed.Load() {
		return "", queue.ErrClosed
	}
	ttl := opts.TTL
	enc := q.a.cfg.Encoding
	if enc == Text {
		if err := checkText(body); err != nil {
			return "", err
		}
	}
	blobName := ""
	wire := body
	md := opts.Metadata
	envelop := needsMetaEnvelope(body, md)
	limit := enc.inlineLimit()
	inline := len(body) <= limit && !isEnvelope(body)
	if envelop && inline && len(metaLine(md, len(body)))+len(body) > limit {
		if !q.a.claimCheck() {
			return "", metaSizeError(len(metaLine(md, len(body)))+len(body), limit)
		}
		inline = false
	}
	if !inline {
		if !q.a.claimCheck() {
			if isEnvelope(body) {
				return "", fmt.Errorf("%w: body starts like a claim-check envelope (%s…), which only claim-check may send", queue.ErrInvalidArgument, envelopePrefix)
			}
			return "", fmt.Errorf("%w: body of %d bytes is over the limit of %d", queue.ErrTooLarge, len(body), enc.inlineLimit())
		}
		if envelop {
			// The metadata stays in the message, beside the claim-check
			// envelope: checked before the blob is written.
			cc := q.claimCheckSize(len(body))
			if n := len(metaLine(md, cc)) + cc; n > limit {
				return "", metaSizeError(n, limit)
			}
		}
		var err error
		wire, blobName, err = q.storePayload(ctx, body, ttl)
		if err != nil {
			return "", err
		}
	}
	if envelop {
		wire = append(metaLine(md, len(wire)), wire...)
	}
	text, err := enc.encode(wire)
	if err != nil {
		return "", err
	}
	o := &azqueue.EnqueueMessageOptions{TimeToLive: to.Ptr(ttlSeconds(ttl))}
	if d := opts.InitialVisibilityDelay; d > 0 {
		v := seconds(d)
		if secs := *o.TimeToLive; secs > 0 && v >= secs {
			v = int32(d / time.Second) // CheckPut saw d < ttl
		}
		o.VisibilityTimeout = to.Ptr(v)
	}
	sctx, err := q.sending(ctx)
	if err != nil {
		if blobName != "" {
			q.deletePayload(ctx, "", blobName) // no message was sent
		}
		return "", err
	}
	var resp azqueue.EnqueueMessagesResponse
	err = q.call(sctx, "put", func() error {
		var err error
		resp, err = q.qc.EnqueueMessage(sctx, text, o)
		return err
	})
	if err == nil && (len(resp.Messages) == 0 || resp.Messages[0].MessageID == nil) {
		err = errors.New("the response holds no message id")
	}
	if err != nil {
		var e *Error
		if blobName != "" && errors.As(err, &e) && e.StatusCode >= 400 && e.StatusCode < 500 {
			// Refused for sure: the payload belongs to no message.
			q.deletePayload(ctx, "", blobName)
		}
		return "", err
	}
	return *resp.Messages[0].MessageID, nil
}

// ttlSeconds is Azure's messagettl: -1 for NoExpiry, else whole seconds
// rounded up; a TTL beyond int32 seconds (68 years) is forever too.
func ttlSeconds(ttl time.Duration) int32 {
	if ttl == driver.NoExpiry {
		return -1
	}
	s := seconds(ttl)
	if s == math.MaxInt32 {
		return -1
	}
	return s
}

// Get returns up to n visible messages, each hidden for visibility rounded
// up to whole seconds (Azure's resolution; at least one second).
func (q *Queue) Get(ctx context.Context, n int, visibility time.Duration) ([]*driver.Message, error) {
	if q.a.closed.Load() {
		return nil, queue.ErrClosed
	}
	if err := q.checkPayloads(ctx); err != nil {
		return nil, err
	}
	o := &azqueue.DequeueMessagesOptions{NumberOfMessages: to.Ptr(int32(n)), VisibilityTimeout: to.Ptr(seconds(visibility))}
	var resp azqueue.DequeueMessagesResponse
	err := q.call(ctx, "get", func() error {
		var err error
		resp, err = q.qc.DequeueMessages(ctx, o)
		return err
	})
	if err != nil {
		return nil, err
	}
	ms := make([]*driver.Message, 0, len(resp.Messages))
	for _, dm := range resp.Messages {
		if dm == nil || dm.MessageID == nil || dm.PopReceipt == nil {
			continue
		}
		md, body := openMetaEnvelope(q.a.cfg.Encoding.decode(deref(dm.MessageText)))
		m := &driver.Message{
			ID:            *dm.MessageID,
			PopReceipt:    *dm.PopReceipt,
			Body:          body,
			Metadata:      md,
			DequeueCount:  int(deref(dm.DequeueCount)),
			InsertedAt:    derefTime(dm.InsertionTime),
			ExpiresAt:     expiry(dm.ExpirationTime),
			NextVisibleAt: derefTime(dm.TimeNextVisible),
		}
		ms = append(ms, m)
	}
	return q.resolve(ctx, "get", ms)
}

// resolve replaces claim-check envelopes with their payloads. A message
// whose payload cannot be read now is released (get) and left out; one
// whose payload blob is gone for good is deleted and left out, since no
// consumer could ever handle it. One whose container is missing is a
// configuration error, not a lost payload: it is released like one that
// cannot be read now, and the Gets that follow fail (checkPayloads) until
// the payload can be read. If every message was left out, the first
// error but a gone payload's is returned.
func (q *Queue) resolve(ctx context.Context, op string, ms []*driver.Message) ([]*driver.Message, error) {
	var idx []int
	for i, m := range ms {
		if isEnvelope(m.Body) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return ms, nil
	}
	errs := make([]error, len(ms))
	var g errgroup.Group
	g.SetLimit(payloadFetches)
	for _, i := range idx {
		m := ms[i]
		g.Go(func() error {
			body, name, err := q.loadPayload(ctx, op, m.Body)
			if err != nil {
				errs[i] = err
				return nil
			}
			m.Body = body
			if name != "" && m.PopReceipt != "" {
				m.PopReceipt = joinReceipt(m.PopReceipt, name, m.ID)
			}
			return nil
		})
	}
	_ = g.Wait()
	out := ms[:0:0]
	var first error // the first error but a payload gone for good
	for i, m := range ms {
		err := errs[i]
		if err == nil {
			out = append(out, m)
			continue
		}
		if first == nil && !errors.Is(err, errPayloadGone) {
			first = err
		}
		if op != "get" {
			continue // peek: nothing is held
		}
		if errors.Is(err, errPayloadGone) {
			q.log.Warn("azure: deleting a claim-check message whose payload is gone",
				zap.String("msg_id", m.ID), zap.Int("dequeue_count", m.DequeueCount), zap.Error(err))
			if derr := q.deleteMessage(context.WithoutCancel(ctx), m.ID, m.PopReceipt); derr != nil {
				q.log.Warn("azure: deleting the message failed", zap.String("msg_id", m.ID), zap.Error(derr))
			}
			continue
		}
		q.log.Warn("azure: reading a claim-check payload failed; releasing the message",
			zap.String("msg_id", m.ID), zap.Error(err))
		if _, uerr := q.updateVisibility(context.WithoutCancel(ctx), m.ID, m.PopReceipt, 0); uerr != nil {
			q.log.Debug("azure: releasing the message failed; it reappears after its visibility timeout",
				zap.String("msg_id", m.ID), zap.Error(uerr))
		}
	}
	if len(out) == 0 && first != nil {
		return nil, first
	}
	return out, nil
}

func deref[T any](p *T) T {
	var z T
	if p == nil {
		return z
	}
	return *p
}

func derefTime(p *time.Time) time.Time {
	if p == nil {
		return time.Time{}
	}
	return p.UTC()
}

// expiry maps Azure's expiration time to the contract's: a message put
// with NoExpiry (Azure answers 9999-12-31) has the zero time.
func expiry(p *time.Time) time.Time {
	if p == nil || p.Year() >= 9999 {
		return time.Time{}
	}
	return p.UTC()
}

// validID reports whether id can be a message id in a URL path (Azure's
// are GUIDs). Anything else cannot name a message.
func validID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// Delete removes a message (and its claim-check payload).
func (q *Queue) Delete(ctx context.Context, id, popReceipt string) error {
	return q.deleteMessage(ctx, id, popReceipt)
}

func (q *Queue) deleteMessage(ctx context.Context, id, popReceipt string) error {
	if !validID(id) {
		return fmt.Errorf("%w: id %q", queue.ErrNotFound, id)
	}
	if popReceipt == "" {
		return fmt.Errorf("%w: empty pop receipt", queue.ErrInvalidArgument)
	}
	if q.a.closed.Load() {
		return queue.ErrClosed
	}
	receipt, blobName, bound := q.splitReceipt(popReceipt, id)
	ctx, err := q.sending(ctx)
	if err != nil {
		return err
	}
	_, err = q.qc.DeleteMessage(ctx, id, receipt, nil)
	if err != nil {
		err = classify(ctx, "delete", q.name, err)
		if errors.Is(err, ErrQueueNotFound) {
			err = fmt.Errorf("%w: %w", queue.ErrNotFound, err)
		}
		if errors.Is(err, queue.ErrNotFound) && bound && q.a.payloads != nil {
			// The message is gone (a retry of a delete whose answer was
			// lost, or it expired): no message names its payload now.
			q.deletePayload(ctx, id, blobName)
		}
		return err
	}
	if blobName != "" && q.a.payloads != nil {
		q.deletePayload(ctx, id, blobName)
	}
	return nil
}

// UpdateVisibility hides a held message for d (rounded up to whole
// seconds; 0 releases it now) and returns the new receipt.
func (q *Queue) UpdateVisibility(ctx context.Context, id, popReceipt string, d time.Duration) (string, error) {
	return q.updateVisibility(ctx, id, popReceipt, d)
}

func (q *Queue) updateVisibility(ctx context.Context, id, popReceipt string, d time.Duration) (string, error) {
	if !validID(id) {
		return "", fmt.Errorf("%w: id %q", queue.ErrNotFound, id)
	}
	if popReceipt == "" {
		return "", fmt.Errorf("%w: empty pop receipt", queue.ErrInvalidArgument)
	}
	if q.a.closed.Load() {
		return "", queue.ErrClosed
	}
	receipt, blobName, _ := q.splitReceipt(popReceipt, id)
	ctx, err := q.sending(ctx)
	if err != nil {
		return "", err
	}
	resp, err := q.qc.UpdateMessage(context.WithValue(ctx, visibilityOnlyKey{}, true), id, receipt, "",
		&azqueue.UpdateMessageOptions{VisibilityTimeout: to.Ptr(seconds(d))})
	if err != nil {
		err = classify(ctx, "update", q.name, err)
		if errors.Is(err, ErrQueueNotFound) {
			return "", fmt.Errorf("%w: %w", queue.ErrNotFound, err)
		}
		return "", err
	}
	if resp.PopReceipt == nil {
		return "", errors.New("the response holds no pop receipt")
	}
	return joinReceipt(*resp.PopReceipt, blobName, id), nil
}

// Peek returns up to n visible messages without hiding them.
func (q *Queue) Peek(ctx context.Context, n int) ([]*driver.Message, error) {
	var resp azqueue.PeekMessagesResponse
	err := q.call(ctx, "peek", func() error {
		var err error
		resp, err = q.qc.PeekMessages(ctx, &azqueue.PeekMessagesOptions{NumberOfMessages: to.Ptr(int32(n))})
		return err
	})
	if err != nil {
		return nil, err
	}
	ms := make([]*driver.Message, 0, len(resp.Messages))
	for _, pm := range resp.Messages {
		if pm == nil || pm.MessageID == nil {
			continue
		}
		md, body := openMetaEnvelope(q.a.cfg.Encoding.decode(deref(pm.MessageText)))
		ms = append(ms, &driver.Message{
			ID:           *pm.MessageID,
			Body:         body,
			Metadata:     md,
			DequeueCount: int(deref(pm.DequeueCount)),
			InsertedAt:   derefTime(pm.InsertionTime),
			ExpiresAt:    expiry(pm.ExpirationTime),
		})
	}
	return q.resolve(ctx, "peek", ms)
}

// Count is Azure's ApproximateMessagesCount: visible and invisible
// messages, and for a while expired ones too.
func (q *Queue) Count(ctx context.Context) (int, error) {
	var resp azqueue.GetQueuePropertiesResponse
	err := q.call(ctx, "count", func() error {
		var err error
		resp, err = q.qc.GetProperties(ctx, nil)
		return err
	})
	if err != nil {
		return 0, err
	}
	return int(deref(resp.ApproximateMessagesCount)), nil
}

// Clear deletes every message of the queue (Azure's Clear Messages) and the
// claim-check payloads created more than ClearGrace before it began (by
// the servers' clocks). A younger payload may be that of a message still
// on its way (a Put stores the payload before it puts the message), which
// arrives after the Clear and must find its body: it is spared, and left
// to the sweep if its message was cleared.
func (q *Queue) Clear(ctx context.Context) error {
	sctx, err := q.sending(ctx)
	if err != nil {
		return err
	}
	var resp azqueue.ClearMessagesResponse
	err = q.call(sctx, "clear", func() error {
		var err error
		resp, err = q.qc.ClearMessages(sctx, nil)
		return err
	})
	if err != nil {
		return err
	}
	if q.a.payloads == nil || resp.Date == nil {
		return nil
	}
	cutoff := resp.Date.Add(-q.a.clearGrace)
	if _, err := q.deletePayloads(ctx, "clear", func(it *container.BlobItem, _ time.Time) bool {
		return it.Properties != nil && it.Properties.CreationTime != nil && it.Properties.CreationTime.Before(cutoff)
	}); err != nil {
		q.log.Warn("azure: deleting the payloads of cleared messages failed; the sweep will delete them after their expiry", zap.Error(err))
	}
	return nil
}
