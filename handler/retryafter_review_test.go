package handler_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
)

// TestHTTPRetryAfterDateIsCappedLikeSeconds: a downstream's Retry-After in
// seconds is capped at queue.MaxVisibilityTimeout, but the same wait
// written as an HTTP date was not: "Fri, 31 Dec 9999 23:59:59 GMT" asked
// for 292 years (time.Duration's most). Where the listener cannot cap it by
// a message's expiry (a queue whose messages never expire) that hides the
// message for good. Both forms get the same cap.
func TestHTTPRetryAfterDateIsCappedLikeSeconds(t *testing.T) {
	t.Parallel()
	for _, header := range []string{"Fri, 31 Dec 9999 23:59:59 GMT", "99999999999"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", header)
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		t.Cleanup(srv.Close)
		err := mustHTTP(t, srv.URL, handler.HTTPOptions{})(context.Background(), &queue.Message{ID: "m"})
		if d, ok := queue.RetryAfter(err); !ok || d > queue.MaxVisibilityTimeout {
			t.Errorf("Retry-After: %s: queue.RetryAfter = %s, %v; want at most queue.MaxVisibilityTimeout (%s)", header, d, ok, queue.MaxVisibilityTimeout)
		}
	}
}
