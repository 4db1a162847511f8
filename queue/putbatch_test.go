package queue_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/meter"
)

func msgs(n int, body func(i int) []byte) []queue.PutMessage {
	out := make([]queue.PutMessage, n)
	for i := range out {
		out[i].Body = body(i)
	}
	return out
}

func small(i int) []byte { return []byte(fmt.Sprint("m", i)) }

// batcher forwards PutBatch to the memory driver (a wrapper that keeps the
// capability), records each call's size, and can fail calls or entries.
type batcher struct {
	driver.Queue
	f         driver.Features
	mu        sync.Mutex
	calls     []int // messages per call
	bytes     []int // bodies' bytes per call
	failCall  error // returned by every call
	failEntry func(body []byte) error
	puts      atomic.Int32
}

func (b *batcher) Features() driver.Features { return b.f }

func (b *batcher) Put(ctx context.Context, body []byte, o driver.PutOptions) (string, error) {
	b.puts.Add(1)
	return b.Queue.Put(ctx, body, o)
}

func (b *batcher) PutBatch(ctx context.Context, reqs []driver.PutRequest) ([]string, []error, error) {
	size := 0
	for _, r := range reqs {
		size += len(r.Body)
	}
	b.mu.Lock()
	b.calls = append(b.calls, len(reqs))
	b.bytes = append(b.bytes, size)
	b.mu.Unlock()
	if b.failCall != nil {
		return nil, nil, b.failCall
	}
	var keep []driver.PutRequest
	var at []int
	res := make([]error, len(reqs))
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		if b.failEntry != nil {
			if res[i] = b.failEntry(r.Body); res[i] != nil {
				continue
			}
		}
		keep = append(keep, r)
		at = append(at, i)
	}
	if len(keep) > 0 {
		kids, _, err := b.Queue.(driver.PutBatcher).PutBatch(ctx, keep)
		if err != nil {
			return nil, nil, err
		}
		for k, i := range at {
			ids[i] = kids[k]
		}
	}
	return ids, res, nil
}

func newBatcher(t *testing.T, f func(*driver.Features)) (*batcher, *meter.Meter, *queue.Queue) {
	t.Helper()
	d, err := memory.NewStore().Driver("batch")
	if err != nil {
		t.Fatal(err)
	}
	b := &batcher{Queue: d, f: d.Features()}
	if f != nil {
		f(&b.f)
	}
	m := meter.New(0)
	return b, m, queue.New(b, queue.WithObserver(m))
}

func TestPutBatchChunksToTheBatchLimit(t *testing.T) {
	b, m, q := newBatcher(t, func(f *driver.Features) { f.MaxBatch = 10 })
	res, err := q.PutBatch(context.Background(), msgs(25, small))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || r.ID == "" {
			t.Fatalf("message %d: %+v", i, r)
		}
	}
	if fmt.Sprint(b.calls) != "[10 10 5]" || b.puts.Load() != 0 {
		t.Fatalf("calls of %v and %d single puts, want [10 10 5] and none", b.calls, b.puts.Load())
	}
	s := m.Snapshot()
	if s.Calls[meter.PutBatch] != 3 || s.Calls[meter.Put] != 0 || s.MessagesPut != 25 || s.Billed() != 3 {
		t.Fatalf("meter: %v, %d messages put, %d billed; want 3 put_batch calls, 25 messages, 3 billed", s.Map(), s.MessagesPut, s.Billed())
	}
	// In order: the memory driver's ids grow.
	ms, _ := q.Get(context.Background(), 10, 60e9)
	for i, msg := range ms {
		if msg.ID != res[i].ID || string(msg.Body) != fmt.Sprint("m", i) {
			t.Fatalf("got %s %q at %d, want %s %q", msg.ID, msg.Body, i, res[i].ID, fmt.Sprint("m", i))
		}
	}
}

// SQS bills a SendMessageBatch as one request per 64 KiB of its payload,
// and carries at most MaxBatchBytes in one call.
func TestPutBatchBillsByPayloadAndSplitsBySize(t *testing.T) {
	b, m, q := newBatcher(t, func(f *driver.Features) {
		f.MaxBatch, f.BillingChunk, f.MaxBatchBytes, f.MaxBody = 10, 64<<10, 300<<10, 256<<10
	})
	big := func(int) []byte { return bytes.Repeat([]byte{'x'}, 100<<10) }
	res, err := q.PutBatch(context.Background(), msgs(7, big))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("message %d: %v", i, r.Err)
		}
	}
	if fmt.Sprint(b.calls) != "[3 3 1]" {
		t.Fatalf("calls of %v messages (%v bytes), want [3 3 1] under 300 KiB each", b.calls, b.bytes)
	}
	// 300 KiB = 5 requests, twice; 100 KiB = 2.
	if s := m.Snapshot(); s.Calls[meter.PutBatch] != 3 || s.Billed() != 12 {
		t.Fatalf("meter: %v, billed %d; want 3 calls billed as 12 requests", s.Map(), s.Billed())
	}
}

func TestPutBatchInvalidMessagesFailAlone(t *testing.T) {
	b, m, q := newBatcher(t, nil)
	in := msgs(4, small)
	in[1].Body = bytes.Repeat([]byte{'x'}, q.MaxBodySize()+1)
	in[3].Opts.TTL = -7e9
	res, err := q.PutBatch(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[1].Err, queue.ErrTooLarge) || !strings.Contains(res[1].Err.Error(), "message 1 of 4") ||
		!strings.Contains(res[1].Err.Error(), fmt.Sprint(q.MaxBodySize()+1)) {
		t.Errorf("oversized message: %v", res[1].Err)
	}
	if !errors.Is(res[3].Err, queue.ErrInvalidArgument) || !strings.Contains(res[3].Err.Error(), "ttl -7s") {
		t.Errorf("negative ttl: %v", res[3].Err)
	}
	if res[0].Err != nil || res[2].Err != nil || res[1].ID != "" || res[3].ID != "" {
		t.Errorf("results %+v", res)
	}
	if fmt.Sprint(b.calls) != "[2]" {
		t.Errorf("calls of %v, want one of the 2 valid messages", b.calls)
	}
	if n, _ := q.Count(context.Background()); n != 2 {
		t.Errorf("Count = %d, want 2", n)
	}
	if s := m.Snapshot(); s.Rejected != 2 || s.MessagesPut != 2 {
		t.Errorf("meter: %d rejected, %d put; want 2 and 2", s.Rejected, s.MessagesPut)
	}
}

func TestPutBatchReportsDriverFailuresPerMessage(t *testing.T) {
	refused := errors.New("refused by the backend")
	b, m, q := newBatcher(t, func(f *driver.Features) { f.MaxBatch = 3 })
	b.failEntry = func(body []byte) error {
		if string(body) == "m1" {
			return fmt.Errorf("%w: %w", queue.ErrTooLarge, refused)
		}
		if string(body) == "m4" {
			return driver.Transient(errors.New("busy"), 0)
		}
		return nil
	}
	res, err := q.PutBatch(context.Background(), msgs(5, small))
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(res[1].Err, refused) || queue.IsTransient(res[1].Err) || !strings.Contains(res[1].Err.Error(), "message 1") {
		t.Errorf("entry refused: %v", res[1].Err)
	}
	if !queue.IsTransient(res[4].Err) {
		t.Errorf("entry failed transiently: %v, want transient", res[4].Err)
	}
	for _, i := range []int{0, 2, 3} {
		if res[i].Err != nil || res[i].ID == "" {
			t.Errorf("message %d: %+v", i, res[i])
		}
	}
	if s := m.Snapshot(); s.MessagesPut != 3 || s.Calls[meter.PutBatch] != 2 {
		t.Errorf("meter: %v, %d put; want 2 calls, 3 messages", s.Map(), s.MessagesPut)
	}

	// A call that fails as a whole fails each of its messages.
	b.failEntry = nil
	b.failCall = driver.Transient(errors.New("connection reset"), 0)
	res, err = q.PutBatch(context.Background(), msgs(4, small))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if !queue.IsTransient(r.Err) || r.ID != "" {
			t.Errorf("message %d of a failed call: %+v, want a transient error", i, r)
		}
	}
	if s := m.Snapshot(); s.Errors[meter.PutBatch] != 2 {
		t.Errorf("meter: %d failed batch calls, want 2", s.Errors[meter.PutBatch])
	}
}

// A wrapper that embeds the driver hides its batch put, as it hides
// UpdateVisibilityBatch: PutBatch then puts one message a call, each
// billed, every message still stored once.
func TestPutBatchThroughAWrapperPutsEach(t *testing.T) {
	var puts atomic.Int32
	m := meter.New(0)
	q, err := memory.NewStore().Queue("wrapped", queue.WithObserver(m), queue.WithWrapper(func(d driver.Queue) driver.Queue {
		return putCounter{d, &puts}
	}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := q.PutBatch(context.Background(), msgs(40, small))
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for i, r := range res {
		if r.Err != nil || ids[r.ID] {
			t.Fatalf("message %d: %+v", i, r)
		}
		ids[r.ID] = true
	}
	if s := m.Snapshot(); puts.Load() != 40 || s.Calls[meter.Put] != 40 || s.MessagesPut != 40 {
		t.Fatalf("%d puts, meter %v: want 40 puts", puts.Load(), s.Map())
	}
	if n, _ := q.Count(context.Background()); n != 40 {
		t.Fatalf("Count = %d, want 40", n)
	}
}

type putCounter struct {
	driver.Queue
	n *atomic.Int32
}

func (c putCounter) Put(ctx context.Context, body []byte, o driver.PutOptions) (string, error) {
	c.n.Add(1)
	return c.Queue.Put(ctx, body, o)
}

func TestPutBatchRefusedAsAWhole(t *testing.T) {
	_, _, q := newBatcher(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res, err := q.PutBatch(ctx, msgs(3, small)); !errors.Is(err, context.Canceled) || res != nil {
		t.Errorf("cancelled: %v, %v", res, err)
	}
	if res, err := q.PutBatch(context.Background(), nil); err != nil || res != nil {
		t.Errorf("empty batch: %v, %v", res, err)
	}
	q.Close()
	if _, err := q.PutBatch(context.Background(), msgs(3, small)); !errors.Is(err, queue.ErrClosed) {
		t.Errorf("closed: %v", err)
	}
}

// Where metadata counts against the message size (Features().Metadata.
// InBody: SQS sends it as attributes within the call's payload), the size
// split counts each message's metadata with its body; elsewhere only the
// bodies.
func TestPutBatchSplitCountsMetadataInBody(t *testing.T) {
	for _, c := range []struct {
		inBody bool
		want   string
	}{{true, "[2 2 2]"}, {false, "[6]"}} {
		t.Run(fmt.Sprint("InBody=", c.inBody), func(t *testing.T) {
			b, _, q := newBatcher(t, func(f *driver.Features) {
				f.MaxBatch, f.MaxBatchBytes, f.MaxBody = 10, 300<<10, 256<<10
				f.Metadata = driver.MetadataLimits{MaxPairs: 8, MaxKey: driver.MaxMetadataKey, MaxValue: 64 << 10, InBody: c.inBody, PairOverhead: 6}
			})
			in := msgs(6, func(int) []byte { return bytes.Repeat([]byte{'x'}, 50<<10) })
			for i := range in {
				in[i].Opts.Metadata = map[string]string{"k": strings.Repeat("v", 50<<10)}
			}
			res, err := q.PutBatch(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range res {
				if r.Err != nil {
					t.Fatalf("message %d: %v", i, r.Err)
				}
			}
			// 6 bodies of 50 KiB fit 300 KiB; with 50 KiB of metadata each, 2 do.
			if fmt.Sprint(b.calls) != c.want {
				t.Fatalf("calls of %v messages, want %s", b.calls, c.want)
			}
		})
	}
}

// A message whose metadata breaks the rules fails alone with the typed
// *MetadataError, naming its place in the batch; nothing is written for
// it, and the others are stored with their own metadata.
func TestPutBatchBadMetadataFailsAlone(t *testing.T) {
	b, m, q := newBatcher(t, nil)
	in := msgs(3, small)
	in[0].Opts.Metadata = map[string]string{"tenant": "a"}
	in[1].Opts.Metadata = map[string]string{"ok": "v", "a b": "v"}
	in[2].Opts.Metadata = map[string]string{"tenant": "c"}
	res, err := q.PutBatch(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	var me *queue.MetadataError
	if !errors.As(res[1].Err, &me) || !errors.Is(res[1].Err, queue.ErrInvalidMetadata) || me.Key != "a b" ||
		me.Limit != "key characters" || !strings.Contains(res[1].Err.Error(), "message 1 of 3") || res[1].ID != "" {
		t.Fatalf("message with bad metadata: id %q, error %v; want a *MetadataError for key %q", res[1].ID, res[1].Err, "a b")
	}
	if fmt.Sprint(b.calls) != "[2]" {
		t.Errorf("calls of %v, want one of the 2 valid messages", b.calls)
	}
	if s := m.Snapshot(); s.Rejected != 1 || s.MessagesPut != 2 {
		t.Errorf("meter: %d rejected, %d put; want 1 and 2", s.Rejected, s.MessagesPut)
	}
	ms, err := q.Get(context.Background(), 10, 60e9)
	if err != nil || len(ms) != 2 {
		t.Fatalf("Get = %d, %v; want the 2 valid messages", len(ms), err)
	}
	for _, msg := range ms {
		want := map[string]string{res[0].ID: "a", res[2].ID: "c"}[msg.ID]
		if msg.Metadata["tenant"] != want || len(msg.Metadata) != 1 {
			t.Errorf("message %s (%q): metadata %q, want tenant %q", msg.ID, msg.Body, msg.Metadata, want)
		}
	}
}
