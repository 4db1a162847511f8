package sqs_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/queuetest"
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

// newFaultProxy is the shared HTTP fault layer in front of the emulator,
// its requests counted by SQS action (a ReceiveMessage with a
// WaitTimeSeconds, a long poll, as "ReceiveMessage(wait)").
func newFaultProxy(t testing.TB, endpoint string) *queuetest.HTTPFaultProxy {
	t.Helper()
	return queuetest.NewHTTPFaultProxy(t, endpoint, func(r *http.Request, body []byte) string {
		a := r.Header.Get("X-Amz-Target") // AmazonSQS.ReceiveMessage
		if i := strings.LastIndexByte(a, '.'); i >= 0 {
			a = a[i+1:]
		} else {
			a = "other"
		}
		if a == "ReceiveMessage" {
			var in struct{ WaitTimeSeconds int }
			if json.Unmarshal(body, &in) == nil && in.WaitTimeSeconds > 0 {
				return longPoll
			}
		}
		return a
	})
}

// longPoll is the kind of a ReceiveMessage that waits.
const longPoll = "ReceiveMessage(wait)"

// sqsError is a fault the proxy answers as SQS's JSON protocol answers an
// error.
func sqsError(status int, code, msg string) queuetest.HTTPFault {
	body, _ := json.Marshal(map[string]string{"__type": "com.amazonaws.sqs#" + code, "message": msg})
	return queuetest.Answer(code, status, http.Header{
		"Content-Type":       {"application/x-amz-json-1.0"},
		"X-Amzn-Query-Error": {code + ";Sender"},
	}, body)
}

// SQS's transient errors.
var (
	faultInternal    = sqsError(http.StatusInternalServerError, "InternalError", "We encountered an internal error. Please try again.")
	faultUnavailable = sqsError(http.StatusServiceUnavailable, "ServiceUnavailable", "The request has failed due to a temporary failure of the server.")
	faultThrottled   = sqsError(http.StatusBadRequest, "RequestThrottled", "Rate exceeded")
)

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
