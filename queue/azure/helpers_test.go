package azure_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
	"github.com/adaptq/adaptq/queue/queuetest"
)

var ctx = context.Background()

// noRetry is the SDK options of the tests' own raw clients.
var noRetry = policy.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}, InsecureAllowCredentialWithHTTP: true}

// rawQueue is the SDK's own client for a queue on srv, to look at what
// the driver wrote or to write as another producer would.
func rawQueue(t testing.TB, srv *azuritetest.Server, name string) *azqueue.QueueClient {
	t.Helper()
	cred, err := azqueue.NewSharedKeyCredential(azuritetest.Account, azuritetest.Key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := azqueue.NewQueueClientWithSharedKeyCredential(srv.QueueEndpoint+"/"+name, cred, &azqueue.ClientOptions{ClientOptions: noRetry})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rawContainer is the SDK's client for a container on srv.
func rawContainer(t testing.TB, srv *azuritetest.Server, name string) *container.Client {
	t.Helper()
	cred, err := azblob.NewSharedKeyCredential(azuritetest.Account, azuritetest.Key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := container.NewClientWithSharedKeyCredential(srv.BlobEndpoint+"/"+name, cred, &container.ClientOptions{ClientOptions: noRetry})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// blobs lists the blob names under prefix in a container on srv (none if
// the container does not exist).
func blobs(t testing.TB, srv *azuritetest.Server, containerName, prefix string) []string {
	t.Helper()
	p := rawContainer(t, srv, containerName).NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: to.Ptr(prefix)})
	var names []string
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			if strings.Contains(err.Error(), "ContainerNotFound") {
				return nil
			}
			t.Fatal(err)
		}
		for _, it := range page.Segment.BlobItems {
			names = append(names, *it.Name)
		}
	}
	return names
}

// names hands each test queue names of its own: a shared Azurite keeps
// queues and blobs from one run of a test to the next (go test -count=2),
// and from other tests.
var names = struct {
	sync.Mutex
	seq   int
	byRun map[testing.TB]map[string]string
}{byRun: map[testing.TB]map[string]string{}}

// uniq is the name of the queue a test calls base: base with a number
// no other test and no earlier run of this one had. Within one run of a
// test the same base is the same name, so that a test can open its queue
// twice (through two accounts, by URL and by the SDK).
func uniq(t testing.TB, base string) string {
	t.Helper()
	names.Lock()
	defer names.Unlock()
	m, ok := names.byRun[t]
	if !ok {
		m = map[string]string{}
		names.byRun[t] = m
		t.Cleanup(func() {
			names.Lock()
			delete(names.byRun, t)
			names.Unlock()
		})
	}
	if n, ok := m[base]; ok {
		return n
	}
	names.seq++
	n := base + "-" + strconv.Itoa(names.seq)
	if len(n) > 63 {
		t.Fatalf("queue name %q is longer than Azure's 63 characters", n)
	}
	m[base] = n
	return n
}

// openQueue opens name on acct, closed at the end of the test.
func openQueue(t testing.TB, acct *azure.Account, name string, opts ...queue.Option) *queue.Queue {
	t.Helper()
	q, err := acct.Queue(ctx, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// sweep runs the claim-check sweep of q's driver (reached with As).
func sweep(t testing.TB, q *queue.Queue) (int, error) {
	t.Helper()
	var aq *azure.Queue
	if !q.As(&aq) {
		t.Fatal("As gave no *azure.Queue")
	}
	return aq.Sweep(ctx)
}

// fill puts n small messages with 8 producers.
func fill(t testing.TB, q *queue.Queue, n int) map[string]bool {
	t.Helper()
	var mu sync.Mutex
	ids := make(map[string]bool, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				id, err := q.Put(ctx, []byte("message "+strconv.FormatInt(i, 10)), queue.PutOptions{})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				ids[id] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	return ids
}

// newFaultProxy is the shared HTTP fault layer in front of Azurite's queue
// service (target: its endpoint), its requests counted by kind as the
// meter names calls: put, get, peek, delete, update, count, clear, create.
// Its endpoint for an account is proxyEndpoint.
func newFaultProxy(t testing.TB, target string) *queuetest.HTTPFaultProxy {
	t.Helper()
	return queuetest.NewHTTPFaultProxy(t, target, kind)
}

// proxyEndpoint is the development account's queue endpoint through p.
func proxyEndpoint(p *queuetest.HTTPFaultProxy) string { return p.URL + "/" + azuritetest.Account }

// kind names a request as the meter does: put, get, peek, delete, update,
// count, clear, create.
func kind(r *http.Request, _ []byte) string {
	path := r.URL.Path
	switch {
	case strings.Contains(path, "/messages/"):
		if r.Method == http.MethodDelete {
			return "delete"
		}
		return "update"
	case strings.HasSuffix(path, "/messages"):
		switch {
		case r.Method == http.MethodPost:
			return "put"
		case r.Method == http.MethodDelete:
			return "clear"
		case r.URL.Query().Get("peekonly") == "true":
			return "peek"
		}
		return "get"
	case r.URL.Query().Get("comp") == "metadata":
		return "count"
	case r.Method == http.MethodPut:
		return "create"
	}
	return "other"
}

// azureError is a fault the proxy answers as Azure Storage answers an
// error: the code in x-ms-error-code and an XML body whose message ends
// with the request id and time; a Retry-After if retryAfter > 0.
func azureError(name string, status int, code, msg string, retryAfter int) queuetest.HTTPFault {
	h := http.Header{"Content-Type": {"application/xml"}, "X-Ms-Error-Code": {code}}
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	return queuetest.Answer(name, status, h, []byte(`<?xml version="1.0" encoding="utf-8"?><Error><Code>`+code+`</Code><Message>`+msg+
		"\nRequestId:00000000-0000-0000-0000-000000000000\nTime:2026-01-01T00:00:00.0000000Z</Message></Error>"))
}

// Azure's transient errors: 503 ServerBusy without and with a Retry-After
// (seconds), 500 InternalError.
var (
	faultBusy     = azureError("busy", http.StatusServiceUnavailable, "ServerBusy", "The server is busy.", 0)
	faultInternal = azureError("internal", http.StatusInternalServerError, "InternalError", "The server encountered an internal error.", 0)
)

func faultBusyRetryAfter(seconds int) queuetest.HTTPFault {
	return azureError("busy_retry_after", http.StatusServiceUnavailable, "ServerBusy", "The server is busy.", seconds)
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
