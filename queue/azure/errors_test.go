package azure_test

import (
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/sas"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
	"github.com/adaptq/adaptq/queue/queuetest"
)

// azureErr returns err's *azure.Error, failing the test if there is none.
func azureErr(t *testing.T, err error) *azure.Error {
	t.Helper()
	var e *azure.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *azure.Error", err, err)
	}
	return e
}

func TestErrorMapping(t *testing.T) {
	srv := azuritetest.Shared(t)
	acct := newAccount(t, srv, azure.Config{})
	q := openQueue(t, acct, uniq(t, "err-mapping"))

	if _, err := q.Put(ctx, []byte("m"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	ms, err := q.Get(ctx, 1, time.Second)
	if err != nil || len(ms) != 1 {
		t.Fatalf("Get: %v, %v", ms, err)
	}
	m1 := ms[0]
	r2, err := q.UpdateVisibility(ctx, m1.ID, m1.PopReceipt, time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	// A stale receipt: 400 PopReceiptMismatch.
	err = q.Delete(ctx, m1.ID, m1.PopReceipt)
	if !errors.Is(err, queue.ErrReceiptMismatch) {
		t.Fatalf("Delete with a stale receipt: %v", err)
	}
	if e := azureErr(t, err); e.StatusCode != 400 || e.Code != "PopReceiptMismatch" || queue.IsTransient(err) {
		t.Errorf("stale receipt: status %d code %q transient %v", e.StatusCode, e.Code, queue.IsTransient(err))
	}
	if !strings.Contains(err.Error(), strconv.Quote(uniq(t, "err-mapping"))) || !strings.Contains(err.Error(), "PopReceiptMismatch") {
		t.Errorf("error text %q does not name the queue and the code", err)
	}
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		t.Error("the SDK's ResponseError is not reachable with errors.As")
	}
	_, err = q.UpdateVisibility(ctx, m1.ID, m1.PopReceipt, 0)
	if !errors.Is(err, queue.ErrReceiptMismatch) {
		t.Fatalf("UpdateVisibility with a stale receipt: %v", err)
	}

	// A deleted message: 404 MessageNotFound.
	if err := q.Delete(ctx, m1.ID, r2); err != nil {
		t.Fatal(err)
	}
	err = q.Delete(ctx, m1.ID, r2)
	if !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Delete of a deleted message: %v", err)
	}
	if e := azureErr(t, err); e.StatusCode != 404 || e.Code != "MessageNotFound" {
		t.Errorf("deleted message: status %d code %q", e.StatusCode, e.Code)
	}
	_, err = q.UpdateVisibility(ctx, m1.ID, r2, time.Second)
	if !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("UpdateVisibility of a deleted message: %v", err)
	}
	// Ids that cannot be Azure's are not sent.
	for _, id := range []string{"", "../other-queue", "a?b", "x/y"} {
		if err := q.Delete(ctx, id, r2); !errors.Is(err, queue.ErrNotFound) {
			t.Errorf("Delete(%q): %v, want ErrNotFound", id, err)
		}
	}
	if err := q.Delete(ctx, m1.ID, ""); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("Delete with an empty receipt: %v", err)
	}
}

func TestQueueNotFound(t *testing.T) {
	srv := azuritetest.Shared(t)
	noCreate := newAccount(t, srv, azure.Config{NoCreate: true})
	_, err := noCreate.Queue(ctx, uniq(t, "never-created"))
	if !errors.Is(err, azure.ErrQueueNotFound) {
		t.Fatalf("open with create=false: %v, want ErrQueueNotFound", err)
	}
	if !strings.Contains(err.Error(), "create=false") || !strings.Contains(err.Error(), strconv.Quote(uniq(t, "never-created"))) {
		t.Errorf("error %q does not say what to do", err)
	}
	// By URL as well.
	_, err = queue.Open(ctx, srv.URL(uniq(t, "never-created"), "create", "false"))
	if !errors.Is(err, azure.ErrQueueNotFound) {
		t.Fatalf("queue.Open with create=false: %v", err)
	}
	if _, err := rawQueue(t, srv, uniq(t, "never-created")).GetProperties(ctx, nil); err == nil {
		t.Fatal("create=false created the queue")
	}

	// A queue deleted while open: an error with create=false…
	acct := newAccount(t, srv, azure.Config{})
	q := openQueue(t, acct, uniq(t, "deleted-while-open"))
	q2 := openQueue(t, noCreate, uniq(t, "deleted-while-open"))
	if _, err := rawQueue(t, srv, uniq(t, "deleted-while-open")).Delete(ctx, nil); err != nil {
		t.Fatal(err)
	}
	_, err = q2.Put(ctx, []byte("x"), queue.PutOptions{})
	if !errors.Is(err, azure.ErrQueueNotFound) || queue.IsTransient(err) {
		t.Fatalf("Put to a deleted queue with create=false: %v", err)
	}
	if e := azureErr(t, err); e.StatusCode != 404 || e.Code != "QueueNotFound" {
		t.Errorf("status %d code %q", e.StatusCode, e.Code)
	}
	if _, err := q2.Get(ctx, 1, time.Second); !errors.Is(err, azure.ErrQueueNotFound) {
		t.Fatalf("Get from a deleted queue with create=false: %v", err)
	}
	if err := q2.Delete(ctx, "00000000-0000-0000-0000-000000000000", "AAAA"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Delete in a deleted queue: %v, want ErrNotFound (no message can be there)", err)
	}
	// …and created again on demand by default.
	if _, err := q.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
		t.Fatalf("Put to a deleted queue with create=true: %v", err)
	}
	if n, err := q.Count(ctx); err != nil || n != 1 {
		t.Fatalf("Count after the re-creating Put = %d, %v", n, err)
	}
}

func TestTooLargeWithoutClaimCheck(t *testing.T) {
	srv := azuritetest.Shared(t)
	for _, c := range []struct {
		enc   azure.Encoding
		limit int
		name  string
	}{
		{azure.Base64, azure.MaxInlineBody, "inline-base64"},
		{azure.Text, azure.MaxMessageSize, "inline-text"},
	} {
		acct := newAccount(t, srv, azure.Config{NoClaimCheck: true, Encoding: c.enc})
		q := openQueue(t, acct, uniq(t, c.name))
		if got := q.MaxBodySize(); got != c.limit {
			t.Errorf("%s: MaxBodySize = %d, want %d", c.enc, got, c.limit)
		}
		full := []byte(strings.Repeat("z", c.limit))
		if _, err := q.Put(ctx, full, queue.PutOptions{}); err != nil {
			t.Fatalf("%s: Put of %d bytes (the limit): %v", c.enc, c.limit, err)
		}
		_, err := q.Put(ctx, append(full, 'z'), queue.PutOptions{})
		if !errors.Is(err, queue.ErrTooLarge) || !strings.Contains(err.Error(), "65537") && !strings.Contains(err.Error(), "49153") {
			t.Fatalf("%s: Put of %d bytes: %v, want ErrTooLarge naming the size", c.enc, c.limit+1, err)
		}
		if n, err := q.Count(ctx); err != nil || n != 1 {
			t.Fatalf("%s: Count = %d, %v after a refused put", c.enc, n, err)
		}
		ms, err := q.Get(ctx, 1, time.Minute)
		if err != nil || len(ms) != 1 || len(ms[0].Body) != c.limit {
			t.Fatalf("%s: the body at the limit did not come back whole", c.enc)
		}
		if bs := blobs(t, srv, azure.DefaultContainer, uniq(t, c.name)+"/"); len(bs) != 0 {
			t.Fatalf("%s: claim_check=false wrote blobs %v", c.enc, bs)
		}
	}
}

func TestAuthFailureShowsNoSecret(t *testing.T) {
	srv := azuritetest.Shared(t)
	_, err := queue.Open(ctx, "azure://"+azuritetest.Account+"/"+uniq(t, "auth-fail")+"?endpoint="+url.QueryEscape(srv.QueueEndpoint)+
		"&key="+url.QueryEscape(secretKey))
	if err == nil {
		t.Fatal("a wrong key opened the queue")
	}
	e := azureErr(t, err)
	if e.StatusCode != 403 || queue.IsTransient(err) {
		t.Errorf("wrong key: status %d code %q transient %v", e.StatusCode, e.Code, queue.IsTransient(err))
	}
	if strings.Contains(err.Error(), secretKey) || strings.Contains(err.Error(), url.QueryEscape(secretKey)) {
		t.Fatalf("error %q shows the key", err)
	}
	_, err = queue.Open(ctx, "azure://"+azuritetest.Account+"/"+uniq(t, "auth-fail")+"?endpoint="+url.QueryEscape(srv.QueueEndpoint)+
		"&sas="+url.QueryEscape("sv=2024-08-04&ss=q&srt=sco&sp=rwdlacup&se=2001-01-01T00:00:00Z&sig=SECRETSIG"))
	if err == nil {
		t.Fatal("an expired SAS opened the queue")
	}
	if strings.Contains(err.Error(), "SECRETSIG") {
		t.Fatalf("error %q shows the SAS", err)
	}
}

// closedEndpoint is a loopback address nothing listens on.
func closedEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr + "/" + azuritetest.Account
}

func TestTransportFailuresAreTransient(t *testing.T) {
	srv := azuritetest.Shared(t)

	// Nothing listening: refused, transient, and the SAS stays hidden.
	dead, err := azure.NewAccount(azure.Config{Account: azuritetest.Account, QueueEndpoint: closedEndpoint(t), SAS: "sv=1&sig=SECRETSIG"})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	_, err = dead.Queue(ctx, uniq(t, "transport"))
	if !queue.IsTransient(err) {
		t.Fatalf("connection refused: %v, want transient", err)
	}
	if strings.Contains(err.Error(), "SECRETSIG") {
		t.Fatalf("error %q shows the SAS", err)
	}
	if e := azureErr(t, err); e.StatusCode != 0 {
		t.Errorf("status %d for a failure without a response", e.StatusCode)
	}

	// A server slower than the timeout: transient, not the caller's
	// context.
	p := newFaultProxy(t, srv.QueueEndpoint)
	slow := newAccount(t, srv, azure.Config{QueueEndpoint: proxyEndpoint(p), Timeout: 200 * time.Millisecond})
	// Opening creates the queue through the proxy within the 200 ms
	// timeout, which a busy machine may miss: a transient error, retried.
	var sq *queue.Queue
	for deadline := time.Now().Add(2 * time.Minute); sq == nil; {
		q, err := slow.Queue(ctx, uniq(t, "transport"))
		switch {
		case err == nil:
			sq = q
			t.Cleanup(func() { _ = q.Close() })
		case !queue.IsTransient(err) || time.Now().After(deadline):
			t.Fatal(err)
		}
	}
	p.SetDelay(time.Second)
	_, err = sq.Get(ctx, 1, time.Second)
	if !queue.IsTransient(err) {
		t.Fatalf("timeout: %v, want transient", err)
	}
	p.SetDelay(0)

	// Connections closed without an answer, before and after the server
	// acted: transient.
	for _, f := range []queuetest.HTTPFault{queuetest.HangUp, queuetest.LoseAnswer} {
		p.Arm(1, f)
		_, err := sq.Put(ctx, []byte("x"), queue.PutOptions{})
		if !queue.IsTransient(err) {
			t.Fatalf("connection closed (%s): %v, want transient", f.Name, err)
		}
	}
}

// TestOneRequestPerCall checks that the SDK's retry policy is off: a 503
// costs exactly one request, and comes back transient with the server's
// Retry-After.
func TestOneRequestPerCall(t *testing.T) {
	srv := azuritetest.Shared(t)
	p := newFaultProxy(t, srv.QueueEndpoint)
	acct := newAccount(t, srv, azure.Config{QueueEndpoint: proxyEndpoint(p)})
	q := openQueue(t, acct, uniq(t, "one-request"))
	if _, err := q.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	before, _ := p.Counts()
	p.Arm(1, faultBusy)
	_, err := q.Get(ctx, 1, time.Second)
	after, _ := p.Counts()
	if !queue.IsTransient(err) {
		t.Fatalf("503 ServerBusy: %v, want transient", err)
	}
	if e := azureErr(t, err); e.StatusCode != 503 || e.Code != "ServerBusy" || e.Message != "The server is busy." {
		t.Errorf("503: status %d code %q message %q", e.StatusCode, e.Code, e.Message)
	}
	if _, ok := queue.RetryAfter(err); ok {
		t.Error("a 503 without Retry-After carries a retry-after hint")
	}
	if n := sum(after) - sum(before); n != 1 {
		t.Fatalf("one failed Get made %d requests: the SDK retried", n)
	}

	p.Arm(1, faultBusyRetryAfter(3))
	err = q.Delete(ctx, "00000000-0000-0000-0000-000000000000", "AAAA")
	if ra, ok := queue.RetryAfter(err); !ok || ra != 3*time.Second || !queue.IsTransient(err) {
		t.Fatalf("503 with Retry-After: 3: %v (retry after %v, %v)", err, ra, ok)
	}
	final, _ := p.Counts()
	if n := sum(final) - sum(after); n != 1 {
		t.Fatalf("one failed Delete made %d requests", n)
	}

	p.Arm(1, faultInternal)
	_, err = q.Put(ctx, []byte("y"), queue.PutOptions{})
	if e := azureErr(t, err); !queue.IsTransient(err) || e.StatusCode != 500 || e.Code != "InternalError" {
		t.Fatalf("500 InternalError: %v, want transient", err)
	}
	if last, _ := p.Counts(); sum(last)-sum(final) != 1 {
		t.Fatalf("one failed Put made %d requests", sum(last)-sum(final))
	}
}

// TestSAS opens a queue with an account SAS instead of the key.
func TestSAS(t *testing.T) {
	srv := azuritetest.Shared(t)
	cred, err := azqueue.NewSharedKeyCredential(azuritetest.Account, azuritetest.Key)
	if err != nil {
		t.Fatal(err)
	}
	perms := sas.AccountPermissions{Read: true, Write: true, Delete: true, List: true, Add: true, Create: true, Update: true, Process: true}
	qp, err := sas.AccountSignatureValues{
		Protocol:      sas.ProtocolHTTPSandHTTP,
		ExpiryTime:    time.Now().Add(time.Hour).UTC(),
		Permissions:   perms.String(),
		ResourceTypes: (&sas.AccountResourceTypes{Service: true, Container: true, Object: true}).String(),
	}.SignWithSharedKey(cred)
	if err != nil {
		t.Fatal(err)
	}
	token := qp.Encode()
	t.Setenv("ADAPTQ_TEST_SAS", token)
	q, err := queue.Open(ctx, "azure://"+azuritetest.Account+"/"+uniq(t, "sas-queue")+"?endpoint="+url.QueryEscape(srv.QueueEndpoint)+"&sas_env=ADAPTQ_TEST_SAS&claim_check=false")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.Put(ctx, []byte("with a SAS"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	ms, err := q.Get(ctx, 1, time.Minute)
	if err != nil || len(ms) != 1 || string(ms[0].Body) != "with a SAS" {
		t.Fatalf("Get with a SAS: %v", err)
	}
	if err := q.Delete(ctx, ms[0].ID, ms[0].PopReceipt); err != nil {
		t.Fatal(err)
	}
}
