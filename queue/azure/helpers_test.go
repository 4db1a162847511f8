package azure_test

import (
	"context"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
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

// faultProxy is a reverse proxy in front of Azurite that fails a share of
// the requests the way Azure and networks do: 503 ServerBusy (with or
// without a Retry-After), a connection closed before the request reaches
// the server, and a connection closed after the server acted on it but
// before the client read the answer.
type faultProxy struct {
	URL      string // http://127.0.0.1:PORT
	Endpoint string // URL + "/devstoreaccount1"

	// Shares of requests, in parts per thousand.
	Busy, BusyRetryAfter, DropBefore, DropAfter, Internal atomic.Int32
	// RetryAfter is the Retry-After the busy answers with a hint carry.
	RetryAfter atomic.Int64 // seconds
	// Delay holds every request this long before forwarding it.
	Delay atomic.Int64 // ns

	// Counts of what happened, by request kind (see kind).
	mu       sync.Mutex
	rng      *rand.Rand
	requests map[string]int
	faults   map[string]int

	rp  *httputil.ReverseProxy
	srv *http.Server
}

func newFaultProxy(t testing.TB, target string) *faultProxy {
	t.Helper()
	tu, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	tu.Path = ""
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{
		URL:      "http://" + ln.Addr().String(),
		rng:      rand.New(rand.NewPCG(1, 2)),
		requests: map[string]int{},
		faults:   map[string]int{},
	}
	p.Endpoint = p.URL + "/" + azuritetest.Account
	p.RetryAfter.Store(1)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	tr.IdleConnTimeout = azure.DefaultIdleConnTimeout // below Azurite's keep-alive
	p.rp = &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(tu) },
		Transport: tr,
		ErrorLog:  log.New(io.Discard, "", 0), // cancelled requests are expected here
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve)}
	go func() { _ = p.srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.srv.Shutdown(ctx)
		tr.CloseIdleConnections()
	})
	return p
}

// kind names a request as the meter does: put, get, peek, delete, update,
// count, clear, create, blob.
func kind(r *http.Request) string {
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

func (p *faultProxy) serve(w http.ResponseWriter, r *http.Request) {
	k := kind(r)
	p.mu.Lock()
	p.requests[k]++
	roll := int32(p.rng.IntN(1000))
	p.mu.Unlock()
	if d := time.Duration(p.Delay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	}
	fault := func(name string) {
		p.mu.Lock()
		p.faults[name]++
		p.mu.Unlock()
	}
	busy, busyRA := p.Busy.Load(), p.BusyRetryAfter.Load()
	before, after := p.DropBefore.Load(), p.DropAfter.Load()
	internal := p.Internal.Load()
	switch {
	case roll < internal:
		fault("internal")
		writeError(w, http.StatusInternalServerError, "InternalError", "The server encountered an internal error.", 0)
	case roll < internal+busy:
		fault("busy")
		writeBusy(w, 0)
	case roll < internal+busy+busyRA:
		fault("busy_retry_after")
		writeBusy(w, p.RetryAfter.Load())
	case roll < internal+busy+busyRA+before:
		fault("drop_before")
		hangUp(w)
	case roll < internal+busy+busyRA+before+after:
		fault("drop_after")
		rec := httptest.NewRecorder()
		p.rp.ServeHTTP(rec, r) // the server acts on it…
		hangUp(w)              // …and the answer is lost
	default:
		p.rp.ServeHTTP(w, r)
	}
}

func writeBusy(w http.ResponseWriter, retryAfter int64) {
	writeError(w, http.StatusServiceUnavailable, "ServerBusy", "The server is busy.", retryAfter)
}

// writeError answers as Azure Storage does: the code in x-ms-error-code
// and an XML body whose message ends with the request id and time.
func writeError(w http.ResponseWriter, status int, code, msg string, retryAfter int64) {
	h := w.Header()
	h.Set("Content-Type", "application/xml")
	h.Set("x-ms-error-code", code)
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(retryAfter, 10))
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`<?xml version="1.0" encoding="utf-8"?><Error><Code>` + code + `</Code><Message>` + msg +
		"\nRequestId:00000000-0000-0000-0000-000000000000\nTime:2026-01-01T00:00:00.0000000Z</Message></Error>"))
}

// hangUp closes the client's connection without an answer.
func hangUp(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// counts returns copies of the request and fault counts.
func (p *faultProxy) counts() (requests, faults map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	requests, faults = map[string]int{}, map[string]int{}
	for k, v := range p.requests {
		requests[k] = v
	}
	for k, v := range p.faults {
		faults[k] = v
	}
	return requests, faults
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
