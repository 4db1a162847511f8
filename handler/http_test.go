package handler_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
)

// mustHTTP builds an HTTP handler or fails the test.
func mustHTTP(t *testing.T, rawURL string, o handler.HTTPOptions) handler.Func {
	t.Helper()
	h, err := handler.HTTP(rawURL, o)
	if err != nil {
		t.Fatalf("HTTP(%q): %v", rawURL, err)
	}
	return h
}

// received is what a test server saw of one request.
type received struct {
	method, uri, host string
	header            http.Header
	body              []byte
	contentLength     int64
}

// recorder starts a server that records each request and answers status.
func recorder(t *testing.T, status int) (*httptest.Server, func() []received) {
	t.Helper()
	var mu sync.Mutex
	var got []received
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("server: read body: %v", err)
		}
		mu.Lock()
		got = append(got, received{r.Method, r.RequestURI, r.Host, r.Header.Clone(), body, r.ContentLength})
		mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []received {
		mu.Lock()
		defer mu.Unlock()
		return append([]received(nil), got...)
	}
}

func TestHTTPRequest(t *testing.T) {
	t.Parallel()
	body := []byte("\x00binary\xffbody\n")
	ins := time.Date(2024, 3, 5, 14, 7, 9, 5e8, time.FixedZone("CET", 3600))
	m := &queue.Message{ID: "msg-7", DequeueCount: 2, InsertedAt: ins, Body: body}
	tests := []struct {
		name        string
		o           handler.HTTPOptions
		m           *queue.Message
		wantType    string
		wantQueue   string // "" means the header must be absent
		wantHeaders map[string]string
		wantHost    string
	}{
		{name: "defaults", m: m, wantType: "application/octet-stream"},
		{name: "queue, headers and content type", m: m,
			o: handler.HTTPOptions{Queue: "orders", ContentType: "application/json",
				Header: http.Header{"Authorization": {"Bearer t0k"}, "x-custom": {"a", "b"}}},
			wantType: "application/json", wantQueue: "orders",
			wantHeaders: map[string]string{"Authorization": "Bearer t0k", "X-Custom": "a,b"}},
		{name: "content type from Header", m: m,
			o:        handler.HTTPOptions{Header: http.Header{"Content-Type": {"text/csv"}}},
			wantType: "text/csv"},
		{name: "ContentType wins over Header", m: m,
			o:        handler.HTTPOptions{ContentType: "text/plain", Header: http.Header{"Content-Type": {"text/csv"}}},
			wantType: "text/plain"},
		{name: "message headers win over Header", m: m,
			o: handler.HTTPOptions{Queue: "q", Header: http.Header{
				handler.HeaderMessageID: {"forged"}, handler.HeaderQueue: {"other"}}},
			wantType: "application/octet-stream", wantQueue: "q"},
		{name: "Host header", m: m, o: handler.HTTPOptions{Header: http.Header{"Host": {"api.example"}}},
			wantType: "application/octet-stream", wantHost: "api.example"},
		{name: "empty body, no insertion time", m: &queue.Message{ID: "m", DequeueCount: 1},
			wantType: "application/octet-stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, got := recorder(t, http.StatusNoContent)
			h := mustHTTP(t, srv.URL+"/hook?x=1", tt.o)
			if err := h(context.Background(), tt.m); err != nil {
				t.Fatal(err)
			}
			reqs := got()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.method != http.MethodPost || r.uri != "/hook?x=1" {
				t.Errorf("request %s %s, want POST /hook?x=1", r.method, r.uri)
			}
			if !bytes.Equal(r.body, tt.m.Body) || r.contentLength != int64(len(tt.m.Body)) {
				t.Errorf("body %q (Content-Length %d), want %q", r.body, r.contentLength, tt.m.Body)
			}
			want := map[string]string{
				"Content-Type":             tt.wantType,
				handler.HeaderMessageID:    tt.m.ID,
				handler.HeaderDequeueCount: strconv.Itoa(tt.m.DequeueCount),
				handler.HeaderQueue:        tt.wantQueue,
			}
			if !tt.m.InsertedAt.IsZero() {
				want[handler.HeaderInsertedAt] = "2024-03-05T13:07:09Z"
			}
			for k, v := range tt.wantHeaders {
				want[k] = v
			}
			for k, v := range want {
				if got := strings.Join(r.header.Values(k), ","); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			if tt.m.InsertedAt.IsZero() && r.header.Get(handler.HeaderInsertedAt) != "" {
				t.Errorf("header %s sent for a message without an insertion time", handler.HeaderInsertedAt)
			}
			if tt.wantHost != "" && r.host != tt.wantHost {
				t.Errorf("Host = %q, want %q", r.host, tt.wantHost)
			}
		})
	}
}

func TestHTTPStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status    int
		ok        bool
		permanent bool
	}{
		{200, true, false}, {201, true, false}, {202, true, false}, {204, true, false},
		{301, false, false}, {302, false, false}, {303, false, false}, {304, false, false},
		{400, false, true}, {401, false, true}, {403, false, true}, {404, false, true},
		{405, false, true}, {409, false, true}, {410, false, true}, {413, false, true},
		{415, false, true}, {422, false, true},
		{408, false, false}, {429, false, false},
		{500, false, false}, {502, false, false}, {503, false, false}, {504, false, false},
	}
	var redirected atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { redirected.Add(1) }))
	t.Cleanup(target.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		if status >= 300 && status < 400 {
			w.Header().Set("Location", target.URL)
		}
		w.WriteHeader(status)
		if status != http.StatusNoContent && status != http.StatusNotModified {
			_, _ = io.WriteString(w, "reason for "+strconv.Itoa(status))
		}
	}))
	t.Cleanup(srv.Close)

	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
			t.Parallel()
			h := mustHTTP(t, srv.URL+"/"+strconv.Itoa(tt.status), handler.HTTPOptions{})
			err := h(context.Background(), &queue.Message{ID: "m", Body: []byte("REQUEST-BODY")})
			if tt.ok {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			se, ok := errors.AsType[*handler.StatusError](err)
			if !ok {
				t.Fatalf("err = %#v, want a *StatusError", err)
			}
			if se.StatusCode != tt.status {
				t.Errorf("StatusCode = %d, want %d", se.StatusCode, tt.status)
			}
			if got := handler.IsPermanent(err); got != tt.permanent {
				t.Errorf("IsPermanent(%v) = %v, want %v", err, got, tt.permanent)
			}
			text := err.Error()
			if !strings.Contains(text, strconv.Itoa(tt.status)+" "+http.StatusText(tt.status)) {
				t.Errorf("Error() = %q does not name the status", text)
			}
			if tt.status != http.StatusNotModified && !strings.Contains(text, "reason for") {
				t.Errorf("Error() = %q lacks the response body", text)
			}
			if strings.Contains(text, "REQUEST-BODY") {
				t.Errorf("Error() = %q contains the request body", text)
			}
		})
	}
	t.Cleanup(func() {
		if n := redirected.Load(); n != 0 {
			t.Errorf("a 301/302/303 was followed %d times (as a GET without the body)", n)
		}
	})
}

func TestHTTPRetryAfter(t *testing.T) {
	t.Parallel()
	date := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	tests := []struct {
		header   string
		min, max time.Duration
	}{
		{"7", 7 * time.Second, 7 * time.Second},
		{date, 58 * time.Minute, time.Hour},
		{"", 0, 0},
		{"soon", 0, 0},
		{"-3", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.header, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.header != "" {
					w.Header().Set("Retry-After", tt.header)
				}
				w.WriteHeader(http.StatusTooManyRequests)
			}))
			t.Cleanup(srv.Close)
			err := mustHTTP(t, srv.URL, handler.HTTPOptions{})(context.Background(), &queue.Message{ID: "m"})
			d, ok := queue.RetryAfter(err)
			if ok != (tt.max > 0) || d < tt.min || d > tt.max {
				t.Errorf("queue.RetryAfter(%v) = %s, %v; want [%s, %s]", err, d, ok, tt.min, tt.max)
			}
		})
	}
}

// slowServer answers only when the request's context ends or the test does.
func slowServer(t *testing.T) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs first: Close waits for handlers
	return srv
}

func TestHTTPTimeout(t *testing.T) {
	t.Parallel()
	srv := slowServer(t)
	h := mustHTTP(t, srv.URL, handler.HTTPOptions{Timeout: 200 * time.Millisecond})
	err := h(context.Background(), &queue.Message{ID: "m", Body: []byte("REQUEST-BODY")})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	if handler.IsPermanent(err) {
		t.Error("a timeout is permanent")
	}
	if !strings.Contains(err.Error(), "200ms") || strings.Contains(err.Error(), "REQUEST-BODY") {
		t.Errorf("Error() = %q, want the timeout and not the body", err)
	}
}

func TestHTTPContextCancel(t *testing.T) {
	t.Parallel()
	srv := slowServer(t)
	h := mustHTTP(t, srv.URL, handler.HTTPOptions{Timeout: -1}) // no limit but ctx
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := h(ctx, &queue.Message{ID: "m"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's error", err)
	}
	if handler.IsPermanent(err) {
		t.Error("a cancellation is permanent")
	}
}

func TestHTTPClosedServer(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + "/hook?token=s3cret"
	srv.Close()
	err := mustHTTP(t, url, handler.HTTPOptions{})(context.Background(), &queue.Message{ID: "m", Body: []byte("REQUEST-BODY")})
	if err == nil {
		t.Fatal("err = nil for a closed server")
	}
	if handler.IsPermanent(err) {
		t.Errorf("IsPermanent(%v) = true, want a retryable failure", err)
	}
	if _, ok := errors.AsType[*handler.StatusError](err); ok {
		t.Errorf("err = %v is a StatusError", err)
	}
	if _, ok := errors.AsType[*net.OpError](err); !ok {
		t.Errorf("errors.As does not reach the *net.OpError: %v", err)
	}
	if text := err.Error(); strings.Contains(text, "s3cret") || strings.Contains(text, "REQUEST-BODY") {
		t.Errorf("Error() = %q leaks a secret or the body", text)
	}
}

func TestHTTPErrorBodyBounded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
	}{
		{"ascii", strings.Repeat("x", 10<<10) + "END"},
		// 511 bytes, then a 2-byte character the 512-byte cut splits.
		{"split character", strings.Repeat("x", 511) + strings.Repeat("é", 100)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = io.WriteString(w, tt.body)
			}))
			t.Cleanup(srv.Close)
			err := mustHTTP(t, srv.URL, handler.HTTPOptions{})(context.Background(), &queue.Message{ID: "m"})
			se, ok := errors.AsType[*handler.StatusError](err)
			if !ok {
				t.Fatalf("err = %v, want a *StatusError", err)
			}
			if len(se.Body) > handler.MaxHTTPErrorBody || len(se.Body) < handler.MaxHTTPErrorBody-3 {
				t.Errorf("len(Body) = %d, want at most %d", len(se.Body), handler.MaxHTTPErrorBody)
			}
			if !utf8.Valid(se.Body) || !strings.HasPrefix(tt.body, string(se.Body)) {
				t.Errorf("Body is not a clean prefix of the response: …%q", se.Body[len(se.Body)-8:])
			}
			if n := len(err.Error()); n > 2*handler.MaxHTTPErrorBody+200 {
				t.Errorf("len(Error()) = %d, not bounded", n)
			}
		})
	}
}

func TestHTTPReusesConnections(t *testing.T) {
	t.Parallel()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Header.Get(handler.HeaderMessageID) == "bad" {
			w.WriteHeader(http.StatusBadRequest)
		}
		// A body longer than the error snippet: the rest must be drained.
		_, _ = io.WriteString(w, strings.Repeat("response ", 1000))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	h := mustHTTP(t, srv.URL, handler.HTTPOptions{})
	for i := range 10 {
		id := "ok"
		if i%2 == 1 {
			id = "bad"
		}
		err := h(context.Background(), &queue.Message{ID: id, Body: []byte("x")})
		if (err != nil) != (id == "bad") {
			t.Fatalf("request %d (%s): err = %v", i, id, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("10 sequential requests used %d connections, want 1", n)
	}
}

func TestHTTPOwnClient(t *testing.T) {
	t.Parallel()
	srv, got := recorder(t, http.StatusOK)
	var used atomic.Bool
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		used.Store(true)
		return http.DefaultTransport.RoundTrip(r)
	})}
	h := mustHTTP(t, srv.URL, handler.HTTPOptions{Client: client})
	if err := h(context.Background(), &queue.Message{ID: "m"}); err != nil {
		t.Fatal(err)
	}
	if !used.Load() || len(got()) != 1 {
		t.Error("the request did not go through HTTPOptions.Client")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestHTTPValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		url  string
		o    handler.HTTPOptions
		want string
	}{
		{name: "ftp", url: "ftp://files.example/in", want: `scheme "ftp" is not http or https`},
		{name: "mailto", url: "mailto:ops@example.com", want: "not http or https"},
		{name: "missing host", url: "http:///hook", want: "has no host"},
		{name: "port but no host", url: "https://:8080/hook", want: "has no host"},
		{name: "opaque", url: "http:hook", want: "has no host"},
		{name: "relative path", url: "/hook", want: "not absolute"},
		{name: "relative name", url: "hooks.example/in", want: "not absolute"},
		{name: "empty", url: "", want: "not absolute"},
		{name: "garbage", url: "::::", want: "invalid URL"},
		{name: "leading blank", url: " http://hooks.example/", want: "invalid URL"},
		{name: "bad host", url: "http://[::1/hook", want: "invalid URL"},
		{name: "password, no host", url: "https://user:hunter2@/hook", want: `"https://user:xxxxx@/hook" has no host`},
		{name: "password, bad port", url: "https://user:hunter2@hooks.example:port/", want: "invalid URL"},
		{name: "password, wrong scheme", url: "ftp://user:hunter2@files.example/", want: `"ftp://user:xxxxx@files.example/"`},
		{name: "secret query, wrong scheme", url: "ftp://files.example/?token=hunter2", want: "REDACTED"},
		{name: "bad header name", url: "https://hooks.example/", o: handler.HTTPOptions{
			Header: http.Header{"Bad Name": {"v"}}}, want: `header name "Bad Name"`},
		{name: "header value with a line break", url: "https://hooks.example/", o: handler.HTTPOptions{
			Header: http.Header{"Authorization": {"Bearer hunter2\r\nX-Evil: 1"}}}, want: `header "Authorization"`},
		{name: "content type with a line break", url: "https://hooks.example/", o: handler.HTTPOptions{
			ContentType: "text/plain\n"}, want: "content type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, err := handler.HTTP(tt.url, tt.o)
			if err == nil {
				t.Fatalf("HTTP(%q) = %v, nil; want an error", tt.url, h)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q leaks the secret", err)
			}
		})
	}
	for _, ok := range []string{"http://hooks.example", "https://user:pw@hooks.example:8443/in?x=1#frag", "HTTPS://[::1]:9/x"} {
		if _, err := handler.HTTP(ok, handler.HTTPOptions{}); err != nil {
			t.Errorf("HTTP(%q): %v", ok, err)
		}
	}
}
