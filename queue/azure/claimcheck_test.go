package azure_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
	"github.com/adaptq/adaptq/queue/queuetest"
)

func randomBody(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(n), 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// rawText peeks the first message's text as the SDK (another consumer)
// sees it.
func rawText(t *testing.T, srv *azuritetest.Server, name string) string {
	t.Helper()
	resp, err := rawQueue(t, srv, name).PeekMessages(ctx, &azqueue.PeekMessagesOptions{NumberOfMessages: to.Ptr(int32(1))})
	if err != nil || len(resp.Messages) != 1 {
		t.Fatalf("raw peek: %v", err)
	}
	return *resp.Messages[0].MessageText
}

// TestClaimCheck1MiB follows one large body through its life: stored as a
// blob with a small envelope in the message, read back whole, carried
// through a visibility update, deleted with its message.
func TestClaimCheck1MiB(t *testing.T) {
	srv := azuritetest.Shared(t)
	acct := newAccount(t, srv, azure.Config{})
	q := openQueue(t, acct, uniq(t, "claim-1mib"))
	if got := q.MaxBodySize(); got != azure.DefaultMaxBodySize {
		t.Errorf("MaxBodySize = %d, want %d", got, azure.DefaultMaxBodySize)
	}
	body := randomBody(1 << 20)
	id, err := q.Put(ctx, body, queue.PutOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	stored := blobs(t, srv, azure.DefaultContainer, uniq(t, "claim-1mib")+"/")
	if len(stored) != 1 {
		t.Fatalf("payload blobs = %v, want one", stored)
	}
	env, err := base64.StdEncoding.DecodeString(rawText(t, srv, uniq(t, "claim-1mib")))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(env, []byte(`{"adaptq":"claim-check/v1"`)) || !bytes.Contains(env, []byte(stored[0])) || len(env) > 200 {
		t.Fatalf("message text is %q, want a small envelope naming %s", env, stored[0])
	}

	ps, err := q.Peek(ctx, 1)
	if err != nil || len(ps) != 1 || !bytes.Equal(ps[0].Body, body) {
		t.Fatalf("Peek did not return the payload (%d messages, %v)", len(ps), err)
	}
	ms, err := q.Get(ctx, 1, time.Minute)
	if err != nil || len(ms) != 1 {
		t.Fatalf("Get: %d messages, %v", len(ms), err)
	}
	if ms[0].ID != id || !bytes.Equal(ms[0].Body, body) {
		t.Fatal("Get did not return the 1 MiB body exactly")
	}
	r2, err := q.UpdateVisibility(ctx, ms[0].ID, ms[0].PopReceipt, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Delete(ctx, ms[0].ID, ms[0].PopReceipt); !errors.Is(err, queue.ErrReceiptMismatch) {
		t.Fatalf("Delete with the receipt before the update: %v", err)
	}
	if bs := blobs(t, srv, azure.DefaultContainer, uniq(t, "claim-1mib")+"/"); len(bs) != 1 {
		t.Fatal("a refused delete deleted the payload")
	}
	if err := q.Delete(ctx, ms[0].ID, r2); err != nil {
		t.Fatal(err)
	}
	if bs := blobs(t, srv, azure.DefaultContainer, uniq(t, "claim-1mib")+"/"); len(bs) != 0 {
		t.Fatalf("payload %v left after its message was deleted", bs)
	}
	if n, _ := q.Count(ctx); n != 0 {
		t.Fatalf("Count = %d", n)
	}
	if _, err := q.Put(ctx, make([]byte, azure.DefaultMaxBodySize+1), queue.PutOptions{}); !errors.Is(err, queue.ErrTooLarge) {
		t.Fatalf("Put over the claim-check limit: %v", err)
	}
}

// TestClaimCheckThreshold: a body that fits a message travels inline, one
// byte more goes to a blob, in both encodings.
func TestClaimCheckThreshold(t *testing.T) {
	srv := azuritetest.Shared(t)
	for _, c := range []struct {
		enc   azure.Encoding
		limit int
		name  string
	}{
		{azure.Base64, azure.MaxInlineBody, "threshold-base64"},
		{azure.Text, azure.MaxMessageSize, "threshold-text"},
	} {
		acct := newAccount(t, srv, azure.Config{Encoding: c.enc})
		q := openQueue(t, acct, uniq(t, c.name))
		for _, n := range []int{c.limit, c.limit + 1} {
			// ASCII: Azurite 3.37 decodes a request body of over 64 KiB
			// chunk by chunk and garbles a multi-byte character split
			// between two chunks (U+FFFD), which Azure does not.
			body := bytes.Repeat([]byte("z"), n)
			if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
				t.Fatalf("%s: Put(%d): %v", c.enc, n, err)
			}
			wantBlobs := 0
			if n > c.limit {
				wantBlobs = 1
			}
			if bs := blobs(t, srv, azure.DefaultContainer, uniq(t, c.name)+"/"); len(bs) != wantBlobs {
				t.Fatalf("%s: %d bytes made blobs %v, want %d", c.enc, n, bs, wantBlobs)
			}
			ms, err := q.Get(ctx, 1, time.Minute)
			if err != nil || len(ms) != 1 || !bytes.Equal(ms[0].Body, body) {
				t.Fatalf("%s: %d bytes did not round-trip (%v)", c.enc, n, err)
			}
			if err := q.Delete(ctx, ms[0].ID, ms[0].PopReceipt); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestClaimCheckLookalike: an inline body never starts like an envelope,
// so a body that does travels as a blob and comes back as it was.
func TestClaimCheckLookalike(t *testing.T) {
	srv := azuritetest.Shared(t)
	acct := newAccount(t, srv, azure.Config{})
	q := openQueue(t, acct, uniq(t, "lookalike"))
	body := []byte(`{"adaptq":"claim-check/v1","container":"adaptq-payloads","blob":"lookalike/00","size":3}`)
	if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if bs := blobs(t, srv, azure.DefaultContainer, uniq(t, "lookalike")+"/"); len(bs) != 1 {
		t.Fatalf("blobs %v, want the look-alike stored as one", bs)
	}
	ms, err := q.Get(ctx, 1, time.Minute)
	if err != nil || len(ms) != 1 || !bytes.Equal(ms[0].Body, body) {
		t.Fatalf("look-alike did not round-trip: %v", err)
	}
	off := newAccount(t, srv, azure.Config{NoClaimCheck: true})
	qo := openQueue(t, off, uniq(t, "lookalike"))
	if _, err := qo.Put(ctx, body, queue.PutOptions{}); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("look-alike with claim_check=false: %v, want ErrInvalidArgument", err)
	}
	// A consumer without claim-check of its own still reads payloads.
	if _, err := q.Put(ctx, randomBody(100_000), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if ms, err := qo.Get(ctx, 1, time.Minute); err != nil || len(ms) != 1 || len(ms[0].Body) != 100_000 {
		t.Fatalf("claim_check=false consumer: %v", err)
	}
}

// TestClaimCheckSweep: payloads of expired messages are deleted by Sweep
// and by the automatic sweep; live and never-expiring ones stay.
func TestClaimCheckSweep(t *testing.T) {
	srv := azuritetest.Shared(t)
	acct := newAccount(t, srv, azure.Config{PayloadGrace: -1, SweepInterval: -1})
	q := openQueue(t, acct, uniq(t, "sweep"))
	big := randomBody(60_000)
	const short = 3 * time.Second
	putAt := time.Now()
	for _, ttl := range []time.Duration{short, time.Hour, queue.NoExpiry} {
		if _, err := q.Put(ctx, big, queue.PutOptions{TTL: ttl}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := sweep(t, q)
	switch {
	case err != nil:
		t.Fatal(err)
	case time.Since(putAt) < short-time.Second && n != 0:
		t.Fatalf("Sweep before any expiry = %d", n)
	case n != 0:
		// A machine too busy to sweep within the short TTL: the payload
		// had expired already. The outcome below is the same.
		t.Logf("the first sweep came %s after the puts, past the short TTL", time.Since(putAt).Round(time.Millisecond))
	}
	// Expiry times are whole seconds: wait a second past the short TTL.
	time.Sleep(time.Until(putAt.Add(short + 1200*time.Millisecond)))
	if n2, err := sweep(t, q); err != nil || n+n2 != 1 {
		t.Fatalf("Sweep after one expiry = %d (and %d before), %v; want 1 in all", n2, n, err)
	}
	if bs := blobs(t, srv, azure.DefaultContainer, uniq(t, "sweep")+"/"); len(bs) != 2 {
		t.Fatalf("blobs after the sweep: %v, want the two live ones", bs)
	}
	ms, err := q.Get(ctx, 32, time.Minute)
	if err != nil || len(ms) != 2 {
		t.Fatalf("Get after the sweep = %d, %v; want the two live messages", len(ms), err)
	}

	// The automatic sweep, started by the first claim-check put.
	auto := newAccount(t, srv, azure.Config{PayloadGrace: -1, SweepInterval: 300 * time.Millisecond})
	qa := openQueue(t, auto, uniq(t, "sweep-auto"))
	if _, err := qa.Put(ctx, big, queue.PutOptions{TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute) // a hang guard: the sweep runs every 300 ms
	for len(blobs(t, srv, azure.DefaultContainer, uniq(t, "sweep-auto")+"/")) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the automatic sweep did not delete the expired payload")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestClaimCheckClear: Clear deletes the payloads of the cleared messages
// and no other queue's. ClearGrace is set to a second: the payloads are
// older than that when the Clear comes.
func TestClaimCheckClear(t *testing.T) {
	srv := azuritetest.Shared(t)
	acct := newAccount(t, srv, azure.Config{})
	azure.SetClearGrace(acct, time.Second)
	q := openQueue(t, acct, uniq(t, "clear-payloads"))
	other := openQueue(t, acct, uniq(t, "clear-payloads-other"))
	for range 2 {
		if _, err := q.Put(ctx, randomBody(70_000), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.Put(ctx, randomBody(70_000), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond) // creation times are in whole seconds: past the grace
	if err := q.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	if bs := blobs(t, srv, azure.DefaultContainer, uniq(t, "clear-payloads")+"/"); len(bs) != 0 {
		t.Fatalf("payloads %v left after Clear", bs)
	}
	if bs := blobs(t, srv, azure.DefaultContainer, uniq(t, "clear-payloads-other")+"/"); len(bs) != 1 {
		t.Fatalf("Clear touched another queue's payloads: %v", bs)
	}
}

// TestClaimCheckPayloadGone: a message whose payload was deleted behind
// the driver's back can never be handled; Get deletes it and goes on.
func TestClaimCheckPayloadGone(t *testing.T) {
	srv := azuritetest.Shared(t)
	acct := newAccount(t, srv, azure.Config{})
	q := openQueue(t, acct, uniq(t, "payload-gone"))
	if _, err := q.Put(ctx, randomBody(70_000), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Put(ctx, []byte("small"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	c := rawContainer(t, srv, azure.DefaultContainer)
	for _, b := range blobs(t, srv, azure.DefaultContainer, uniq(t, "payload-gone")+"/") {
		if _, err := c.NewBlobClient(b).Delete(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := q.Get(ctx, 32, time.Minute)
	if err != nil || len(ms) != 1 || string(ms[0].Body) != "small" {
		t.Fatalf("Get = %d messages, %v; want only the small one", len(ms), err)
	}
	if n, _ := q.Count(ctx); n != 1 {
		t.Fatalf("Count = %d; the message without its payload should be deleted", n)
	}
}

// TestClaimCheckToSibling: moving a large message to another queue (as the
// listener does with poison messages) copies the payload; deleting the
// original deletes only its own.
func TestClaimCheckToSibling(t *testing.T) {
	srv := azuritetest.Shared(t)
	q, err := queue.Open(ctx, srv.URL(uniq(t, "sibling-src")))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	poison, err := q.Sibling(ctx, uniq(t, "sibling-src")+"-poison")
	if err != nil {
		t.Fatal(err)
	}
	defer poison.Close()
	body := randomBody(200_000)
	if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	ms, err := q.Get(ctx, 1, time.Minute)
	if err != nil || len(ms) != 1 {
		t.Fatal(err)
	}
	if _, err := poison.Put(ctx, ms[0].Body, queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := q.Delete(ctx, ms[0].ID, ms[0].PopReceipt); err != nil {
		t.Fatal(err)
	}
	if bs := blobs(t, srv, azure.DefaultContainer, uniq(t, "sibling-src")+"/"); len(bs) != 0 {
		t.Fatalf("original payload left: %v", bs)
	}
	pm, err := poison.Get(ctx, 1, time.Minute)
	if err != nil || len(pm) != 1 || !bytes.Equal(pm[0].Body, body) {
		t.Fatalf("the poison queue's copy did not round-trip: %v", err)
	}
}

func TestTextEncoding(t *testing.T) {
	srv := azuritetest.Shared(t)
	q, err := queue.Open(ctx, srv.URL(uniq(t, "text-enc"), "encoding", "text"))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	good := "héllo <wörld> & \"friends\"\ttab\nnewline 日本語 🎉"
	if _, err := q.Put(ctx, []byte(good), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := rawText(t, srv, uniq(t, "text-enc")); got != good {
		t.Fatalf("raw text %q, want the body as it is", got)
	}
	for _, bad := range [][]byte{{0xff, 0xfe}, []byte("nul\x00"), []byte("cr\r\n"), []byte("bell\a"), []byte("\uFFFE")} {
		_, err := q.Put(ctx, bad, queue.PutOptions{})
		if !errors.Is(err, queue.ErrInvalidArgument) || !strings.Contains(err.Error(), "base64") {
			t.Errorf("text Put(%q): %v, want ErrInvalidArgument pointing to base64", bad, err)
		}
	}
	if n, _ := q.Count(ctx); n != 1 {
		t.Fatalf("refused text puts wrote messages: Count = %d", n)
	}
	ms, err := q.Get(ctx, 1, time.Minute)
	if err != nil || len(ms) != 1 || string(ms[0].Body) != good {
		t.Fatalf("text round trip: %v", err)
	}
}

// TestInterop: messages written by other producers through the SDK.
func TestInterop(t *testing.T) {
	srv := azuritetest.Shared(t)
	q, err := queue.Open(ctx, srv.URL(uniq(t, "interop")))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	raw := rawQueue(t, srv, uniq(t, "interop"))
	bin := []byte{0, 1, 2, 0xff}
	for _, text := range []string{base64.StdEncoding.EncodeToString(bin), "plain text, not base64!"} {
		if _, err := raw.EnqueueMessage(ctx, text, nil); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := q.Get(ctx, 2, time.Minute)
	if err != nil || len(ms) != 2 {
		t.Fatalf("Get: %d, %v", len(ms), err)
	}
	if !bytes.Equal(ms[0].Body, bin) {
		t.Errorf("a base64 producer's message = %q, want %q", ms[0].Body, bin)
	}
	if string(ms[1].Body) != "plain text, not base64!" {
		t.Errorf("a text producer's message in base64 mode = %q, want its text", ms[1].Body)
	}
}

// TestVisibilityRounding: Azure counts in whole seconds; sub-second and
// fractional visibilities round up, never down.
func TestVisibilityRounding(t *testing.T) {
	srv := azuritetest.Shared(t)
	acct := newAccount(t, srv, azure.Config{})
	q := openQueue(t, acct, uniq(t, "rounding"))
	putAt := time.Now()
	if _, err := q.Put(ctx, []byte("r"), queue.PutOptions{InitialVisibilityDelay: 300 * time.Millisecond, TTL: 1500 * time.Millisecond}); err != nil {
		t.Fatalf("Put with sub-second delay and TTL: %v", err)
	}
	time.Sleep(1100 * time.Millisecond)
	gotAt := time.Now()
	ms, err := q.Get(ctx, 1, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 {
		// The TTL, rounded up, is 2 s: a get later than that finds nothing
		// whatever the rounding. A busy machine cannot tell; say so.
		if time.Since(putAt) >= 2*time.Second {
			t.Skipf("the get came %s after the put, past the 2 s TTL: too late to observe the rounding", time.Since(putAt).Round(time.Millisecond))
		}
		t.Fatalf("Get with a 200ms visibility: %d messages; a 1.5 s TTL was rounded down", len(ms))
	}
	if d := ms[0].NextVisibleAt.Sub(ms[0].InsertedAt); d < time.Second {
		t.Errorf("200ms visibility hid the message for %s, want ≥ 1s", d)
	}
	got, _ := q.Get(ctx, 1, time.Second)
	if len(got) != 0 && time.Since(gotAt) < time.Second {
		t.Error("a 200ms visibility did not hide the message at once")
	}
}

// TestClearSparesPayloadsOnTheirWay: a claim-check Put writes its payload
// before it puts its message, so a Clear between the two must not delete
// the payload: the message arrives after the Clear and must come with its
// body. The put's request is held at a proxy in front of the queue
// service while the Clear runs, a second later by the servers' clocks
// (creation times are whole seconds). Before the fix the Clear deleted
// every payload created before it, and the Get that followed found the
// message without its payload and deleted it: lost.
func TestClearSparesPayloadsOnTheirWay(t *testing.T) {
	t.Parallel()
	srv := azuritetest.Shared(t)
	proxy := newFaultProxy(t, srv.QueueEndpoint)
	acct := newAccount(t, srv, azure.Config{QueueEndpoint: proxyEndpoint(proxy)})
	name := uniq(t, "clear-on-the-way")
	q := openQueue(t, acct, name)
	direct := openQueue(t, newAccount(t, srv, azure.Config{}), name)

	arrived, release := make(chan struct{}), make(chan struct{})
	proxy.Arm(1, queuetest.HTTPFault{Name: "hold_put", Do: func(w http.ResponseWriter, _ *http.Request, forward func(http.ResponseWriter)) {
		close(arrived)
		<-release
		forward(w)
	}})
	body := randomBody(100_000)
	type result struct {
		id  string
		err error
	}
	put := make(chan result, 1)
	go func() {
		id, err := q.Put(ctx, body, queue.PutOptions{})
		put <- result{id, err}
	}()
	<-arrived // the payload is stored; its message is on its way
	if bs := blobs(t, srv, azure.DefaultContainer, name+"/"); len(bs) != 1 {
		close(release)
		t.Fatalf("payload blobs while the put is held: %v, want one", bs)
	}
	time.Sleep(1100 * time.Millisecond) // the Clear's Date a second past the payload's creation
	if err := direct.Clear(ctx); err != nil {
		close(release)
		t.Fatal(err)
	}
	close(release)
	r := <-put
	if r.err != nil {
		t.Fatalf("the held Put: %v", r.err)
	}
	ms, err := direct.Get(ctx, 32, time.Minute)
	if err != nil || len(ms) != 1 || ms[0].ID != r.id || !bytes.Equal(ms[0].Body, body) {
		t.Fatalf("Get after the Clear: %d messages, %v; want the one put after it, with its body", len(ms), err)
	}
	if err := direct.Delete(ctx, ms[0].ID, ms[0].PopReceipt); err != nil {
		t.Fatal(err)
	}
	if bs := blobs(t, srv, azure.DefaultContainer, name+"/"); len(bs) != 0 {
		t.Fatalf("payload %v left after its message was deleted", bs)
	}
}

// TestMissingContainerIsAConfigError: a claim-check message whose payload
// container does not exist (an operator deleted it, or the consumer's
// blob_endpoint is not the producer's account) is a configuration error
// the consumer must hear of, never a message whose payload is gone: Get
// keeps it, releases it, and the Gets that follow fail with
// ErrContainerNotFound, naming the container, without taking any message
// (which would raise its dequeue count until the listener poisoned it
// unrun), until the container exists again. Before the fix the first Get
// deleted the message and the next ones returned nothing.
func TestMissingContainerIsAConfigError(t *testing.T) {
	t.Parallel()
	srv := azuritetest.Shared(t)
	cname := uniq(t, "missing-container")
	name := uniq(t, "missing-container-q")
	acct := newAccount(t, srv, azure.Config{Container: cname})
	q := openQueue(t, acct, name)
	big := randomBody(100_000)
	if _, err := q.Put(ctx, big, queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Put(ctx, []byte("small"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rawContainer(t, srv, cname).Delete(ctx, nil); err != nil {
		t.Fatal(err)
	}
	ms, err := q.Get(ctx, 32, time.Minute)
	if err != nil || len(ms) != 1 || string(ms[0].Body) != "small" {
		t.Fatalf("the first Get: %d messages, %v; want the small one", len(ms), err)
	}
	for i := range 2 {
		ms, err := q.Get(ctx, 32, time.Minute)
		if !errors.Is(err, azure.ErrContainerNotFound) || queue.IsTransient(err) || !strings.Contains(err.Error(), cname) {
			t.Fatalf("Get %d after the container was deleted: %d messages, %v; want ErrContainerNotFound naming %s, not transient", i+2, len(ms), err, cname)
		}
	}
	// Nothing was deleted, and the Gets that failed took nothing: the
	// large message was dequeued once.
	raw := rawQueue(t, srv, name)
	resp, err := raw.PeekMessages(ctx, &azqueue.PeekMessagesOptions{NumberOfMessages: to.Ptr(int32(32))})
	if err != nil || len(resp.Messages) != 1 || *resp.Messages[0].DequeueCount != 1 {
		n := -1
		if err == nil && len(resp.Messages) == 1 {
			n = int(*resp.Messages[0].DequeueCount)
		}
		t.Fatalf("raw peek: %d visible messages (dequeue count %d), %v; want the large one, released, dequeued once", len(resp.Messages), n, err)
	}
	// The container back (its payloads are not): Gets take messages again.
	if _, err := rawContainer(t, srv, cname).Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Put(ctx, []byte("after"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for range 3 {
		ms, err := q.Get(ctx, 32, time.Minute)
		if err != nil {
			t.Fatalf("Get with the container back: %v", err)
		}
		for _, m := range ms {
			got[string(m.Body)] = true
		}
		if got["after"] {
			break
		}
	}
	if !got["after"] {
		t.Fatal("Gets with the container back did not return the message put since")
	}
}

// TestLostDeleteReplyDeletesPayload: a Delete of a claim-check message
// whose answer was lost deleted the message but never heard so, and left
// the payload; the caller's retry finds the message gone (ErrNotFound) and
// must delete the payload then, since no message can name it any more.
// Before the fix the payload stayed until the sweep (after its message's
// expiry and PayloadGrace; for a message put with NoExpiry, forever).
func TestLostDeleteReplyDeletesPayload(t *testing.T) {
	t.Parallel()
	srv := azuritetest.Shared(t)
	proxy := newFaultProxy(t, srv.QueueEndpoint)
	acct := newAccount(t, srv, azure.Config{QueueEndpoint: proxyEndpoint(proxy)})
	name := uniq(t, "lost-delete-payload")
	q := openQueue(t, acct, name)
	if _, err := q.Put(ctx, randomBody(100_000), queue.PutOptions{TTL: queue.NoExpiry}); err != nil {
		t.Fatal(err)
	}
	ms, err := q.Get(ctx, 1, time.Minute)
	if err != nil || len(ms) != 1 {
		t.Fatalf("Get: %d, %v", len(ms), err)
	}
	proxy.Arm(1, queuetest.LoseAnswer)
	if err := q.Delete(ctx, ms[0].ID, ms[0].PopReceipt); err == nil {
		t.Fatal("the Delete whose answer was lost succeeded")
	}
	if _, faults := proxy.Counts(); faults["lose_answer"] != 1 {
		t.Fatalf("faults %v, want the lost answer", faults)
	}
	if err := q.Delete(ctx, ms[0].ID, ms[0].PopReceipt); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("the retried Delete: %v, want ErrNotFound", err)
	}
	if bs := blobs(t, srv, azure.DefaultContainer, name+"/"); len(bs) != 0 {
		t.Fatalf("payload %v left after its message was deleted", bs)
	}
	// A receipt passed with the id of no message deletes no payload: the
	// receipt is another message's, which is live.
	if _, err := q.Put(ctx, randomBody(100_000), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	live, err := q.Get(ctx, 1, time.Minute)
	if err != nil || len(live) != 1 {
		t.Fatalf("Get: %d, %v", len(live), err)
	}
	if err := q.Delete(ctx, "00000000-0000-0000-0000-000000000000", live[0].PopReceipt); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Delete of no message with a live one's receipt: %v, want ErrNotFound", err)
	}
	if bs := blobs(t, srv, azure.DefaultContainer, name+"/"); len(bs) != 1 {
		t.Fatalf("payloads %v after a Delete of no message; the live one's must stay", bs)
	}
	if err := q.Delete(ctx, live[0].ID, live[0].PopReceipt); err != nil {
		t.Fatalf("the live message's own Delete: %v", err)
	}
}

// TestBlobOutageRaisesNoDequeueCounts: while the blob service fails (503
// ServerBusy at a proxy in front of it) and the queue service works, a
// claim-check message cannot be handled; Gets must fail, transiently,
// without taking it again and again: each take raises its dequeue count,
// and a listener poisons a message whose count passed MaxDequeueCount
// without running it. The first Get that meets the outage takes it once;
// when the blob service is back, the message comes with a dequeue count of
// 2. Before the fix every Get took and released it: 7 after six Gets in
// the outage, poisoned unrun by the listener's default (5).
func TestBlobOutageRaisesNoDequeueCounts(t *testing.T) {
	t.Parallel()
	srv := azuritetest.Shared(t)
	blobProxy := newFaultProxy(t, srv.BlobEndpoint)
	acct := newAccount(t, srv, azure.Config{BlobEndpoint: proxyEndpoint(blobProxy), Container: uniq(t, "blob-outage-c")})
	q := openQueue(t, acct, uniq(t, "blob-outage"))
	body := randomBody(100_000)
	if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	blobProxy.Arm(1000, faultBusy)
	for i := range 6 {
		ms, err := q.Get(ctx, 32, time.Minute)
		if err == nil || !queue.IsTransient(err) || len(ms) != 0 {
			t.Fatalf("Get %d in the blob outage: %d messages, %v; want a transient error", i+1, len(ms), err)
		}
	}
	blobProxy.Arm(0)
	ms, err := q.Get(ctx, 32, time.Minute)
	if err != nil || len(ms) != 1 || !bytes.Equal(ms[0].Body, body) {
		t.Fatalf("Get after the outage: %d messages, %v; want the message with its body", len(ms), err)
	}
	if ms[0].DequeueCount != 2 {
		t.Fatalf("dequeue count %d after the outage, want 2 (taken once in it, once after)", ms[0].DequeueCount)
	}
}

// TestSweepIgnoresHostClocks: a payload's expiry is judged by the storage
// service's clock, never a host's. A producer whose clock runs 3 h slow
// and a sweeper whose clock runs 3 h fast (both beyond PayloadGrace's
// hour) must not sweep the payload of a live message put with a TTL of an
// hour: the message would then be deleted by the next Get as a message
// whose payload is gone, unrun. Before the fix both clocks were the
// hosts', and the sweep deleted it.
func TestSweepIgnoresHostClocks(t *testing.T) {
	t.Parallel()
	srv := azuritetest.Shared(t)
	name := uniq(t, "sweep-skew")
	slow := newAccount(t, srv, azure.Config{SweepInterval: -1})
	azure.SetClock(slow, func() time.Time { return time.Now().Add(-3 * time.Hour) })
	fast := newAccount(t, srv, azure.Config{SweepInterval: -1})
	azure.SetClock(fast, func() time.Time { return time.Now().Add(3 * time.Hour) })
	producer := openQueue(t, slow, name)
	sweeper := openQueue(t, fast, name)
	body := randomBody(100_000)
	if _, err := producer.Put(ctx, body, queue.PutOptions{TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []*queue.Queue{sweeper, producer} {
		if n, err := sweep(t, q); err != nil || n != 0 {
			t.Fatalf("Sweep of a live message's payload: deleted %d, %v; want 0", n, err)
		}
	}
	ms, err := sweeper.Get(ctx, 1, time.Minute)
	if err != nil || len(ms) != 1 || !bytes.Equal(ms[0].Body, body) {
		t.Fatalf("Get after the sweeps: %d messages, %v; want the live one with its body", len(ms), err)
	}
}
