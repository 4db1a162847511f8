package sqs_test

import (
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/sqs"
)

var ctx = context.Background()

// openQueue opens name on c, closed at the end of the test.
func openQueue(t testing.TB, c *sqs.Client, name string, opts ...queue.Option) *queue.Queue {
	t.Helper()
	q, err := c.Queue(ctx, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
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

// faultProxy is a reverse proxy in front of the emulator that fails a
// share of the requests the way SQS and networks do: 500 InternalError,
// 503 ServiceUnavailable, 400 throttling, a connection closed before the
// request reaches the server, and one closed after the server acted on it
// but before the client read the answer. It also records the longest
// WaitTimeSeconds of the receives it saw.
type faultProxy struct {
	Endpoint string // http://127.0.0.1:PORT

	// Shares of requests, in parts per thousand.
	Internal, Unavailable, Throttled, DropBefore, DropAfter atomic.Int32

	mu       sync.Mutex
	rng      *rand.Rand
	requests map[string]int
	faults   map[string]int
	longPoll int // receives with a WaitTimeSeconds > 0

	rp  *httputil.ReverseProxy
	srv *http.Server
}

func newFaultProxy(t testing.TB, target string) *faultProxy {
	t.Helper()
	tu, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{
		Endpoint: "http://" + ln.Addr().String(),
		rng:      rand.New(rand.NewPCG(1, 2)),
		requests: map[string]int{},
		faults:   map[string]int{},
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	tr.IdleConnTimeout = sqs.DefaultIdleConnTimeout
	p.rp = &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(tu) },
		Transport: tr,
		ErrorLog:  log.New(io.Discard, "", 0),
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

// action is the SQS action a request calls (X-Amz-Target:
// AmazonSQS.ReceiveMessage).
func action(r *http.Request) string {
	a := r.Header.Get("X-Amz-Target")
	if i := strings.LastIndexByte(a, '.'); i >= 0 {
		return a[i+1:]
	}
	return "other"
}

func (p *faultProxy) serve(w http.ResponseWriter, r *http.Request) {
	k := action(r)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		hangUp(w)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	p.mu.Lock()
	p.requests[k]++
	if k == "ReceiveMessage" {
		var in struct{ WaitTimeSeconds int }
		if json.Unmarshal(body, &in) == nil && in.WaitTimeSeconds > 0 {
			p.longPoll++
		}
	}
	roll := int32(p.rng.IntN(1000))
	p.mu.Unlock()
	fault := func(name string) {
		p.mu.Lock()
		p.faults[name]++
		p.mu.Unlock()
	}
	limit := int32(0)
	next := func(share *atomic.Int32) bool {
		limit += share.Load()
		return roll < limit
	}
	switch {
	case next(&p.Internal):
		fault("internal")
		writeError(w, http.StatusInternalServerError, "InternalError", "We encountered an internal error. Please try again.")
	case next(&p.Unavailable):
		fault("unavailable")
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "The request has failed due to a temporary failure of the server.")
	case next(&p.Throttled):
		fault("throttled")
		writeError(w, http.StatusBadRequest, "RequestThrottled", "Rate exceeded")
	case next(&p.DropBefore):
		fault("drop_before")
		hangUp(w)
	case next(&p.DropAfter):
		fault("drop_after")
		rec := httptest.NewRecorder()
		p.rp.ServeHTTP(rec, r) // the server acts on it…
		hangUp(w)              // …and the answer is lost
	default:
		p.rp.ServeHTTP(w, r)
	}
}

// writeError answers as SQS's JSON protocol does.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	h := w.Header()
	h.Set("Content-Type", "application/x-amz-json-1.0")
	h.Set("x-amzn-query-error", code+";Sender")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"__type": "com.amazonaws.sqs#" + code, "message": msg})
}

// hangUp closes the client's connection without an answer.
func hangUp(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// counts returns copies of the request and fault counts, and how many
// receives were long polls.
func (p *faultProxy) counts() (requests, faults map[string]int, longPolls int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	requests, faults = map[string]int{}, map[string]int{}
	for k, v := range p.requests {
		requests[k] = v
	}
	for k, v := range p.faults {
		faults[k] = v
	}
	return requests, faults, p.longPoll
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
