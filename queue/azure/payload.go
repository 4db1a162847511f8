package azure

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"go.uber.org/zap"

	"github.com/adaptq/adaptq/queue"
)

// The claim-check envelope: the text of a message whose body is a blob.
// Its first bytes are envelopePrefix, which no inline body may start with
// (Put stores such a body as a blob too), so a consumer tells the two
// apart without doubt.
type envelope struct {
	Version   string `json:"adaptq"`
	Container string `json:"container"`
	Blob      string `json:"blob"`
	Size      int    `json:"size"`
}

const envelopeVersion = "claim-check/v1"

var envelopePrefix = []byte(`{"adaptq":"` + envelopeVersion + `"`)

// Metadata of a payload blob. metaTTL is its message's time-to-live in
// whole seconds (rounded up): the sweep adds it to the blob's creation
// time, both by the storage service's clock. metaExpires is the expiry by
// the producer's clock (Unix seconds), which drivers before metaTTL wrote
// and swept by; it is still written for them, and read only for a blob
// without metaTTL. A payload of a message put with queue.NoExpiry has
// neither and is never swept.
const (
	metaTTL     = "adaptq_ttl"
	metaExpires = "adaptq_expires"
)

// receiptSep joins Azure's pop receipt, the payload blob's name and a tag
// binding the two to the message's id, in the receipts the driver hands
// out for claim-check messages, so that Delete, in any process, knows which
// blob to delete. Azure's receipts are base64 and never hold it.
const receiptSep = "|"

func isEnvelope(b []byte) bool { return bytes.HasPrefix(b, envelopePrefix) }

// newBlobName is a fresh payload name under the queue's prefix.
func (q *Queue) newBlobName() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return q.name + "/" + hex.EncodeToString(b[:])
}

// ownBlob reports whether name is a payload name of this queue (the shape
// newBlobName makes), so a receipt cannot name any other blob.
func (q *Queue) ownBlob(name string) bool {
	rest, ok := strings.CutPrefix(name, q.name+"/")
	if !ok || len(rest) != 32 {
		return false
	}
	_, err := hex.DecodeString(rest)
	return err == nil
}

// joinReceipt is the receipt of claim-check message id whose payload is
// blobName: Azure's pop receipt, the blob's name and receiptTag.
func joinReceipt(azureReceipt, blobName, id string) string {
	if blobName == "" {
		return azureReceipt
	}
	return azureReceipt + receiptSep + blobName + receiptSep + receiptTag(id, blobName)
}

// receiptTag binds a payload's name to its message's id in a receipt: a
// Delete that finds its message gone deletes the payload its receipt names
// only if the tag shows the receipt is that message's (a receipt passed
// with another message's id must not delete a live message's payload).
func receiptTag(id, blobName string) string {
	h := sha256.Sum256([]byte(id + receiptSep + blobName))
	return hex.EncodeToString(h[:8])
}

// splitReceipt separates Azure's pop receipt from the payload's name, and
// tells whether the receipt's tag binds that payload to message id (a
// receipt of a driver before the tag has none).
func (q *Queue) splitReceipt(r, id string) (azureReceipt, blobName string, bound bool) {
	a, rest, ok := strings.Cut(r, receiptSep)
	if !ok {
		return r, "", false
	}
	b, tag, tagged := strings.Cut(rest, receiptSep)
	if !q.ownBlob(b) {
		return r, "", false
	}
	return a, b, tagged && tag == receiptTag(id, b)
}

// storePayload uploads body as a new blob and returns the envelope text's
// body and the blob's name.
func (q *Queue) storePayload(ctx context.Context, body []byte, ttl time.Duration) (env []byte, name string, err error) {
	a := q.a
	if err := a.ensureContainer(ctx, q.name); err != nil {
		return nil, "", err
	}
	q.startSweeper()
	name = q.newBlobName()
	meta := map[string]*string{}
	if ttl != queue.NoExpiry {
		exp := queue.ExpiresAt(a.now(), ttl)
		if !exp.IsZero() {
			meta[metaExpires] = to.Ptr(strconv.FormatInt(exp.Unix(), 10))
			meta[metaTTL] = to.Ptr(strconv.FormatInt(int64((ttl+time.Second-1)/time.Second), 10))
		}
	}
	_, err = a.payloads.NewBlockBlobClient(name).Upload(ctx, streaming.NopCloser(bytes.NewReader(body)), &blockblob.UploadOptions{
		Metadata:    meta,
		HTTPHeaders: &blob.HTTPHeaders{BlobContentType: to.Ptr("application/octet-stream")},
	})
	if err != nil {
		return nil, "", classify(ctx, "put", q.name, err)
	}
	env, _ = json.Marshal(envelope{Version: envelopeVersion, Container: a.cfg.Container, Blob: name, Size: len(body)})
	return env, name, nil
}

// maxPayload bounds the size an envelope may claim, so that a corrupt one
// cannot make a consumer allocate without limit.
const maxPayload = 1 << 30

// errPayloadGone: a claim-check message whose blob is missing.
var errPayloadGone = errors.New("azure: claim-check payload blob is missing")

// loadPayload reads the blob an envelope names.
func (q *Queue) loadPayload(ctx context.Context, op string, env []byte) (body []byte, name string, err error) {
	var e envelope
	if jerr := json.Unmarshal(env, &e); jerr != nil || e.Version != envelopeVersion || e.Blob == "" || e.Size < 0 || e.Size > maxPayload {
		return nil, "", errors.New("malformed claim-check envelope")
	}
	if q.a.blobs == nil {
		return nil, "", fmt.Errorf("the message's body is in blob %s/%s, but no blob endpoint is configured (blob_endpoint=)", e.Container, e.Blob)
	}
	q.startSweeper()
	c := q.a.payloads
	if e.Container != q.a.cfg.Container {
		c = q.a.containerClient(e.Container)
	}
	resp, err := c.NewBlobClient(e.Blob).DownloadStream(ctx, nil)
	if err != nil {
		err = classify(ctx, op, q.name, err)
		switch {
		case hasCode(err, codeBlobNotFound):
			return nil, e.Blob, fmt.Errorf("%w: %s/%s: %w", errPayloadGone, e.Container, e.Blob, err)
		case ctx.Err() != nil:
			return nil, e.Blob, err // the caller gave up
		}
		// The payloads cannot be read now: the blob service fails, access
		// is refused, or the container is missing (a configuration to
		// fix: deleted, or this consumer's blob endpoint is not the
		// producer's account). Not a lost payload; and the Gets that
		// follow take nothing until it can be read (checkPayloads).
		q.unreadable.Store(&payloadRef{container: e.Container, blob: e.Blob})
		if hasCode(err, codeContainerNotFound) {
			return nil, e.Blob, missingContainerError(e.Container, err)
		}
		return nil, e.Blob, err
	}
	defer resp.Body.Close()
	if resp.ContentLength != nil && *resp.ContentLength != int64(e.Size) {
		return nil, e.Blob, fmt.Errorf("payload %s/%s is %d bytes, its envelope says %d",
			e.Container, e.Blob, *resp.ContentLength, e.Size)
	}
	body = make([]byte, e.Size)
	if _, err := io.ReadFull(resp.Body, body); err != nil {
		return nil, e.Blob, classify(ctx, op, q.name, err) // the connection broke mid-body
	}
	if e.Container == q.a.cfg.Container && q.ownBlob(e.Blob) {
		// Deleted with the message. A payload in another container or
		// under another queue's name (a message copied between queues
		// as it was) is left to its own queue's sweep.
		name = e.Blob
	}
	return body, name, nil
}

// missingContainerError explains err, Azure's ContainerNotFound for a
// payload container.
func missingContainerError(name string, err error) error {
	return fmt.Errorf("claim-check payload container %q: %w (it was deleted, or blob_endpoint= is not the producer's account): "+
		"Gets take no message until it exists", name, err)
}

// payloadRef names a payload blob.
type payloadRef struct{ container, blob string }

// checkPayloads fails a Get, before it takes any message, while the
// payload an earlier Get could not read still cannot be read (one request
// for its properties, the access the download needed, made only in that
// state): taking claim-check messages whose payloads cannot be read would
// only raise their dequeue counts, once a Get, until a listener poisoned
// them unrun. The error is the blob service's (transient while it fails),
// or ErrContainerNotFound. A payload gone meanwhile ends the state: the
// next Get finds its message's payload gone.
func (q *Queue) checkPayloads(ctx context.Context) error {
	p := q.unreadable.Load()
	if p == nil {
		return nil
	}
	_, err := q.a.containerClient(p.container).NewBlobClient(p.blob).GetProperties(ctx, nil)
	if err != nil {
		err = classify(ctx, "get", q.name, err)
		switch {
		case hasCode(err, codeBlobNotFound):
		case hasCode(err, codeContainerNotFound):
			return missingContainerError(p.container, err)
		default:
			return fmt.Errorf("claim-check payloads in container %q cannot be read: %w; Gets take no message until they can", p.container, err)
		}
	}
	q.unreadable.CompareAndSwap(p, nil)
	return nil
}

// containerClient is a client for another container of the account (a
// producer configured with another container).
func (a *Account) containerClient(name string) *container.Client {
	return a.blobs.NewContainerClient(name)
}

// deletePayload deletes a payload after its message was deleted. A failure
// is logged, not returned: the message is gone, and the sweep deletes the
// blob after its expiry.
func (q *Queue) deletePayload(ctx context.Context, msgID, name string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.a.cfg.Timeout+time.Second)
	defer cancel()
	_, err := q.a.payloads.NewBlobClient(name).Delete(ctx, nil)
	if err != nil {
		err = classify(ctx, "delete", q.name, err)
		if hasCode(err, codeBlobNotFound) {
			return
		}
		q.log.Warn("azure: deleting a claim-check payload failed; the sweep will delete it after its expiry",
			zap.String("msg_id", msgID), zap.String("blob", name), zap.Error(err))
	}
}

// Sweep deletes this queue's claim-check payloads whose message has
// expired: blobs under "QUEUE/" in the container more than
// Config.PayloadGrace past their expiry, their creation time plus their
// adaptq_ttl metadata, judged by the storage service's clock (the Date of
// its listing), never a host's: a host whose clock runs fast, or a
// producer's that ran slow, cannot sweep the payload of a live message. It
// returns how many it deleted. A handle that has put or got a claim-check
// message sweeps by itself every Config.SweepInterval; call Sweep to clean
// up on your own schedule (a cron job, after an outage).
func (q *Queue) Sweep(ctx context.Context) (deleted int, err error) {
	if err := q.begin(ctx); err != nil {
		return 0, fmt.Errorf("azure: sweep %q: %w", q.name, err)
	}
	if q.a.payloads == nil {
		return 0, nil
	}
	grace := q.a.cfg.PayloadGrace
	return q.deletePayloads(ctx, "sweep", func(it *container.BlobItem, now time.Time) bool {
		exp, ok := payloadExpiry(it)
		return ok && !now.IsZero() && exp.Add(grace).Before(now)
	})
}

// payloadExpiry is a payload's expiry: its creation time plus its
// adaptq_ttl, or, for a blob an earlier driver wrote, its adaptq_expires.
func payloadExpiry(it *container.BlobItem) (time.Time, bool) {
	if v, ok := metadata(it, metaTTL); ok {
		sec, err := strconv.ParseInt(v, 10, 64)
		if err != nil || sec < 0 || it.Properties == nil || it.Properties.CreationTime == nil {
			return time.Time{}, false
		}
		return it.Properties.CreationTime.Add(time.Duration(sec) * time.Second), true
	}
	if v, ok := metadata(it, metaExpires); ok {
		sec, err := strconv.ParseInt(v, 10, 64)
		return time.Unix(sec, 0), err == nil
	}
	return time.Time{}, false
}

// metadata is a blob's metadata value for key. Azure returns keys as they
// were set; be lenient about their case.
func metadata(it *container.BlobItem, key string) (string, bool) {
	if v := it.Metadata[key]; v != nil {
		return *v, true
	}
	for k, v := range it.Metadata {
		if v != nil && strings.EqualFold(k, key) {
			return *v, true
		}
	}
	return "", false
}

// deletePayloads deletes the queue's payload blobs that match; match
// gets the storage service's time (the Date of the listing's answer; zero
// if it had none).
func (q *Queue) deletePayloads(ctx context.Context, op string, match func(it *container.BlobItem, now time.Time) bool) (int, error) {
	pager := q.a.payloads.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{
		Prefix:  to.Ptr(q.name + "/"),
		Include: container.ListBlobsInclude{Metadata: true},
	})
	deleted := 0
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			err = classify(ctx, op, q.name, err)
			if hasCode(err, codeContainerNotFound) {
				return deleted, nil
			}
			return deleted, err
		}
		var now time.Time
		if page.Date != nil {
			now = *page.Date
		}
		for _, it := range page.Segment.BlobItems {
			if it.Name == nil || !q.ownBlob(*it.Name) || !match(it, now) {
				continue
			}
			_, err := q.a.payloads.NewBlobClient(*it.Name).Delete(ctx, nil)
			if err != nil {
				err = classify(ctx, op, q.name, err)
				if hasCode(err, codeBlobNotFound) {
					continue
				}
				return deleted, err
			}
			deleted++
		}
	}
	return deleted, nil
}

// startSweeper starts the handle's periodic sweep once, when it first
// meets a claim-check payload.
func (q *Queue) startSweeper() {
	if q.a.cfg.SweepInterval <= 0 {
		return
	}
	q.sweepOnce.Do(func() {
		q.sweepStop = make(chan struct{})
		q.sweepDone = make(chan struct{})
		go q.sweepLoop()
	})
}

func (q *Queue) sweepLoop() {
	defer close(q.sweepDone)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-q.sweepStop
		cancel()
	}()
	t := time.NewTicker(q.a.cfg.SweepInterval)
	defer t.Stop()
	for {
		sctx, scancel := context.WithTimeout(ctx, 10*time.Minute)
		n, err := q.Sweep(sctx)
		scancel()
		switch {
		case err != nil && ctx.Err() == nil && !errors.Is(err, queue.ErrClosed):
			q.log.Warn("azure: sweeping expired claim-check payloads failed", zap.Error(err))
		case n > 0:
			q.log.Debug("azure: swept expired claim-check payloads", zap.Int("blobs", n))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if q.a.closed.Load() {
			return // the account was closed under an open queue
		}
	}
}

// stopSweeper stops the sweep, if it runs, and waits for it.
func (q *Queue) stopSweeper() {
	q.sweepOnce.Do(func() {}) // no sweeper may start after Close
	if q.sweepStop != nil {
		close(q.sweepStop)
		<-q.sweepDone
	}
}
