package sqs_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue/queuetest"
	"github.com/adaptq/adaptq/queue/sqs"
	"github.com/adaptq/adaptq/queue/sqs/sqstest"
)

// withoutAttribute passes a GetQueueAttributes to the server and drops
// name from its answer (a server, emulator or proxy that leaves it out).
func withoutAttribute(name string) queuetest.HTTPFault {
	return queuetest.HTTPFault{Name: "drop_" + name, Do: func(w http.ResponseWriter, r *http.Request, forward func(http.ResponseWriter)) {
		rec := httptest.NewRecorder()
		forward(rec)
		body := rec.Body.Bytes()
		if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".GetQueueAttributes") {
			var out map[string]any
			if err := json.Unmarshal(body, &out); err == nil {
				if attrs, ok := out["Attributes"].(map[string]any); ok {
					delete(attrs, name)
				}
				body, _ = json.Marshal(out)
			}
		}
		for k, vs := range rec.Header() {
			if k != "Content-Length" {
				w.Header()[k] = vs
			}
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
	}}
}

// A GetQueueAttributes answer without ApproximateNumberOfMessages is an
// error, not an empty queue: a scale-to-zero signal would stop the
// workers of a queue with a backlog on it.
func TestCountWithoutTheVisibleAttributeIsAnError(t *testing.T) {
	t.Parallel()
	srv := sqstest.Shared(t)
	proxy := newFaultProxy(t, srv.Endpoint)
	c, err := sqs.NewClientIdle(ctx, sqs.Config{
		Region: sqstest.NewRegion(), Account: sqstest.Account, Endpoint: proxy.URL,
	}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := openQueue(t, c, "count-attr")
	fill(t, q, 3)
	for _, name := range []string{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"} {
		proxy.Arm(1, withoutAttribute(name))
		n, err := q.Count(ctx)
		if err == nil {
			t.Errorf("Count with %s left out of the answer: %d, nil; want an error", name, n)
		} else if !strings.Contains(err.Error(), name) {
			t.Errorf("Count with %s left out: %v; want the error to name it", name, err)
		}
		proxy.Arm(1, withoutAttribute(name))
		if d, err := q.Depth(ctx); err == nil {
			t.Errorf("Depth with %s left out of the answer: %+v, nil; want an error", name, d)
		}
	}
	if n, err := q.Count(ctx); err != nil || n != 3 {
		t.Errorf("Count with the whole answer: %d, %v; want 3", n, err)
	}
}
