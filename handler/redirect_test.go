package handler_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
)

// A 307 or 308 to the same origin (a moved path) is followed with the body,
// as before; the request after it carries no Referer, which would repeat the
// handler's URL, query secrets included.
func TestHTTPFollowsSameOriginBodyPreservingRedirectsWithoutAReferer(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var moved []*http.Request
			var bodies []string
			mux := http.NewServeMux()
			mux.Handle("/old", http.RedirectHandler("/moved", status))
			mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				moved, bodies = append(moved, r), append(bodies, string(b))
				mu.Unlock()
			})
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)
			h := mustHTTP(t, srv.URL+"/old?token=abc", handler.HTTPOptions{})
			if err := h(context.Background(), &queue.Message{ID: "m", Body: []byte("payload")}); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(moved) != 1 || moved[0].Method != http.MethodPost || bodies[0] != "payload" {
				t.Fatalf("the moved path got %d requests (%q), want one POST with the body", len(moved), bodies)
			}
			if ref := moved[0].Header.Get("Referer"); ref != "" {
				t.Fatalf("the redirected request sent Referer %q", ref)
			}
		})
	}
}

// A redirect to another origin (here another port of the same address; a
// hostile or compromised downstream's choice) is not followed: the target
// gets nothing, neither the body nor the URL's token in a Referer, and the
// handler fails with the 3xx, naming where it pointed (redacted).
func TestHTTPDoesNotFollowARedirectToAnotherHost(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var got []string
			other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				got = append(got, r.Header.Get("Referer")+" "+string(b))
				mu.Unlock()
			}))
			t.Cleanup(other.Close)
			srv := httptest.NewServer(http.RedirectHandler(other.URL+"/collect?sig=theirs", status))
			t.Cleanup(srv.Close)
			h := mustHTTP(t, srv.URL+"/hook?token=abc", handler.HTTPOptions{})
			err := h(context.Background(), &queue.Message{ID: "m", Body: []byte("payload")})
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 0 {
				t.Fatalf("the other host received %q", got)
			}
			se, ok := errors.AsType[*handler.StatusError](err)
			if !ok || se.StatusCode != status {
				t.Fatalf("err = %v, want a StatusError %d", err, status)
			}
			if handler.IsPermanent(err) {
				t.Errorf("a redirect is retried like a 5xx, but IsPermanent(%v)", err)
			}
			text := err.Error()
			if !strings.Contains(text, strings.TrimPrefix(other.URL, "http://")) || !strings.Contains(text, "not followed") {
				t.Errorf("Error() = %q does not say where the redirect pointed and that it was not followed", text)
			}
			for _, secret := range []string{"abc", "theirs"} {
				if strings.Contains(text, secret) {
					t.Errorf("Error() = %q shows the secret %q", text, secret)
				}
			}
		})
	}
}
