package handler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/adaptq/adaptq/queue"
)

// Request headers that HTTP sets for each message, on top of
// HTTPOptions.Header. They are stable: services in any language may rely
// on them.
const (
	// HeaderMessageID is the message id, the same on every delivery: the
	// key for idempotent processing (an idempotency key).
	HeaderMessageID = "X-Adaptq-Message-Id"
	// HeaderDequeueCount is how many times the message has been got, this
	// delivery included (decimal).
	HeaderDequeueCount = "X-Adaptq-Dequeue-Count"
	// HeaderInsertedAt is when the message was put, in RFC 3339 UTC with
	// whole seconds. It is not sent for a message without an insertion
	// time.
	HeaderInsertedAt = "X-Adaptq-Inserted-At"
	// HeaderQueue is the queue's name, sent when HTTPOptions.Queue is set.
	HeaderQueue = "X-Adaptq-Queue"
)

const (
	// DefaultHTTPTimeout bounds one request, response body included, when
	// HTTPOptions.Timeout is zero. It is queue.DefaultVisibilityTimeout
	// (the message visibility article's 30 s): a request that takes longer than a message stays
	// hidden by default is one the listener must keep renewing.
	DefaultHTTPTimeout = queue.DefaultVisibilityTimeout

	// DefaultHTTPContentType is the Content-Type of the request unless
	// HTTPOptions says otherwise: the body is opaque bytes (RFC 2046's
	// application/octet-stream), whatever the producer put.
	DefaultHTTPContentType = "application/octet-stream"

	// MaxHTTPErrorBody is how much of a failed response's body a
	// StatusError keeps: 512 bytes, enough for a JSON problem report
	// (RFC 9457) or an error line, small enough for a log line.
	MaxHTTPErrorBody = 512
)

const (
	// httpDrainMax is how much of a response body is read before closing
	// it, so the connection can be reused; a longer body costs more to
	// read than a new connection (the figure is net/http's own
	// maxPostHandlerReadBytes).
	httpDrainMax = 256 << 10

	// httpMaxIdleConnsPerHost replaces net/http's default of 2 in the
	// default client: a listener sends up to a batch of queue.MaxBatchSize
	// requests to the same host at once, and should not open and close
	// connections for each batch.
	httpMaxIdleConnsPerHost = queue.MaxBatchSize

	// httpMaxRedirects is the most 307/308 redirects the default client
	// follows (net/http's own limit).
	httpMaxRedirects = 10
)

// HTTPOptions tune HTTP. The zero value posts application/octet-stream with
// a DefaultHTTPTimeout limit, using a client of its own.
type HTTPOptions struct {
	// Queue, if set, is sent as the X-Adaptq-Queue header.
	Queue string

	// Header holds extra request headers (Authorization, for instance). The
	// X-Adaptq- headers of the message override any of the same name. A
	// "Host" entry sets the request's Host.
	Header http.Header

	// ContentType is the request's Content-Type. "" means Header's
	// Content-Type if it has one, else DefaultHTTPContentType.
	ContentType string

	// Timeout bounds one request, together with the handler's context,
	// from the dial to the end of the response body. 0 means
	// DefaultHTTPTimeout; a negative value means no limit but the context.
	Timeout time.Duration

	// Client sends the requests. nil means a client of this handler's own
	// that shares http.DefaultTransport's settings (proxy from the
	// environment, TLS, HTTP/2), keeps up to queue.MaxBatchSize idle
	// connections per host, never sends a Referer, and follows only 307
	// and 308 redirects to the same origin (scheme, host and port as the
	// handler's URL), which repeat the POST with its body. A redirect to
	// another origin is not followed: the body, the headers (credentials
	// among them) and the URL's query would go to a host nobody
	// configured. Other redirects (301, 302, 303) would turn the POST into
	// a GET without the body, so they are not followed either. A redirect
	// not followed fails like a 5xx (it is retried), and its StatusError
	// names where it pointed. A Client of your own is used as it is; its
	// Timeout, if any, applies as well.
	Client *http.Client
}

// StatusError is the error of a request that got a response other than
// 2xx. Whether it is permanent depends on the status (see Permanent).
type StatusError struct {
	// URL is the handler's URL, with any password and secret-looking
	// query values redacted (queue.Redact).
	URL string
	// StatusCode and Status are the response's ("404", "404 Not Found").
	StatusCode int
	Status     string
	// Body is the start of the response body, at most MaxHTTPErrorBody
	// bytes, with the secrets of URLs and secret parameters in it redacted
	// (queue.RedactText).
	Body []byte
	// Location is where a redirect the handler did not follow pointed
	// (redacted with queue.Redact); empty for other responses.
	Location string

	retryAfter time.Duration
}

// Error names the URL, the status and the start of the response body.
func (e *StatusError) Error() string {
	s := fmt.Sprintf("handler: POST %s: %s", e.URL, e.Status)
	if e.Location != "" {
		s += fmt.Sprintf(" (to %s: not followed)", e.Location)
	}
	if b := bytes.TrimSpace(e.Body); len(b) > 0 {
		s += fmt.Sprintf(": %q", b)
	}
	return s
}

// Permanent reports whether retrying the request cannot help: true for a
// 4xx status other than 408 Request Timeout and 429 Too Many Requests
// (the request is wrong: a bad body, a wrong URL, missing credentials),
// false for everything else (5xx, 3xx, 408, 429), which may be over when
// the message is delivered again.
func (e *StatusError) Permanent() bool {
	c := e.StatusCode
	return c >= 400 && c < 500 && c != http.StatusRequestTimeout && c != http.StatusTooManyRequests
}

// RetryAfter returns the wait the server asked for in a Retry-After header
// (seconds or an HTTP date), 0 if none. queue.RetryAfter finds it, so a
// listener's RetryDelay can honour it.
func (e *StatusError) RetryAfter() time.Duration { return e.retryAfter }

// HTTP returns a handler that POSTs each message to rawURL: the body as it
// is, with Content-Type DefaultHTTPContentType (see HTTPOptions.ContentType),
// the headers X-Adaptq-Message-Id, X-Adaptq-Dequeue-Count,
// X-Adaptq-Inserted-At and, if o.Queue is set, X-Adaptq-Queue (see
// HeaderMessageID and the constants after it), and o.Header; when the
// message is traced (package tracing), traceparent and tracestate (see
// Propagation) over o.Header's.
//
// The response decides the message's fate:
//
//   - 2xx: success, the message is deleted;
//   - 408 and 429: a failure, retried on a later delivery;
//   - any other 4xx: a permanent failure (the request is wrong, and sending
//     it again cannot fix that);
//   - 5xx, 3xx (see HTTPOptions.Client), a transport error or a timeout: a
//     failure, retried on a later delivery.
//
// A status other than 2xx is a *StatusError naming the status and the start
// of the response body (at most MaxHTTPErrorBody bytes); no error ever
// contains the request body, and URLs in errors are redacted with
// queue.Redact. A timeout wraps context.DeadlineExceeded. Every response
// body is read (up to a bound) and closed, so connections are reused.
//
// HTTP checks rawURL at once: it must be an absolute http or https URL with
// a host. o.Header names must be valid header names and values must not
// contain line breaks.
func HTTP(rawURL string, o HTTPOptions) (Func, error) {
	redacted := queue.Redact(rawURL)
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the URL, password included, and an escape
		// error quotes the password's characters: give the reason only.
		return nil, fmt.Errorf("handler: http: invalid URL %q: %s", redacted, queue.ParseReason(err))
	}
	switch {
	case !u.IsAbs():
		return nil, fmt.Errorf("handler: http: URL %q is not absolute (want http:// or https://)", redacted)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("handler: http: URL %q: scheme %q is not http or https", redacted, u.Scheme)
	case u.Opaque != "" || u.Hostname() == "":
		return nil, fmt.Errorf("handler: http: URL %q has no host", redacted)
	}

	header := make(http.Header, len(o.Header)+5)
	var host string
	for k, vs := range o.Header {
		if !validHeaderName(k) {
			return nil, fmt.Errorf("handler: http: header name %q is not valid", k)
		}
		for _, v := range vs {
			if !validHeaderValue(v) {
				// The value may be a credential: name the header only.
				return nil, fmt.Errorf("handler: http: header %q has a value with a line break or control character", k)
			}
		}
		if http.CanonicalHeaderKey(k) == "Host" {
			if len(vs) > 0 {
				host = vs[0]
			}
			continue
		}
		header[http.CanonicalHeaderKey(k)] = append(header[http.CanonicalHeaderKey(k)], vs...)
	}
	switch {
	case o.ContentType != "":
		if !validHeaderValue(o.ContentType) {
			return nil, fmt.Errorf("handler: http: content type %q has a line break or control character", o.ContentType)
		}
		header.Set("Content-Type", o.ContentType)
	case header.Get("Content-Type") == "":
		header.Set("Content-Type", DefaultHTTPContentType)
	}

	timeout := o.Timeout
	if timeout == 0 {
		timeout = DefaultHTTPTimeout
	}
	var timeoutErr error
	if timeout > 0 {
		timeoutErr = fmt.Errorf("handler: POST %s: no response within the timeout of %s: %w",
			redacted, timeout, context.DeadlineExceeded)
	}
	client := o.Client
	if client == nil {
		client = newHTTPClient()
	}

	return func(ctx context.Context, m *queue.Message) error {
		if timeoutErr != nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeoutCause(ctx, timeout, timeoutErr)
			defer cancel()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(m.Body))
		if err != nil {
			return fmt.Errorf("handler: POST %s: %w", redacted, err)
		}
		req.Header = header.Clone()
		req.Header.Set(HeaderMessageID, m.ID)
		req.Header.Set(HeaderDequeueCount, strconv.Itoa(m.DequeueCount))
		if !m.InsertedAt.IsZero() {
			req.Header.Set(HeaderInsertedAt, m.InsertedAt.UTC().Format(time.RFC3339))
		}
		if o.Queue != "" {
			req.Header.Set(HeaderQueue, o.Queue)
		}
		// The message's trace (traceparent, tracestate), over o.Header's.
		Propagate(ctx, req.Header.Set)
		if host != "" {
			req.Host = host
		}

		resp, err := client.Do(req)
		if err != nil {
			if timeoutErr != nil && context.Cause(ctx) == timeoutErr {
				return timeoutErr
			}
			if ue, ok := errors.AsType[*url.Error](err); ok {
				ue.URL = redacted // it names the URL, query secrets included
			}
			return fmt.Errorf("handler: %w", err)
		}
		defer drainAndClose(resp.Body)
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			return nil
		}
		se := &StatusError{
			URL:        redacted,
			StatusCode: resp.StatusCode,
			Status:     resp.Status,
			Body:       []byte(queue.RedactText(string(readSnippet(resp.Body, MaxHTTPErrorBody)))),
			retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
		}
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			if loc, err := resp.Location(); err == nil {
				se.Location = queue.Redact(loc.String())
			}
		}
		return se
	}, nil
}

// newHTTPClient is the client HTTP uses when HTTPOptions.Client is nil.
func newHTTPClient() *http.Client {
	var rt http.RoundTripper = http.DefaultTransport
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		t = t.Clone()
		t.MaxIdleConnsPerHost = httpMaxIdleConnsPerHost
		rt = t
	}
	return &http.Client{
		Transport: rt,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			// net/http sets a Referer on a redirect: the handler's URL,
			// whose query may hold a token.
			req.Header.Del("Referer")
			if req.Response == nil {
				return http.ErrUseLastResponse
			}
			switch req.Response.StatusCode {
			case http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
				if !sameOrigin(req.URL, via[0].URL) {
					// The body and the headers would go to a host nobody
					// configured: report the redirect instead.
					return http.ErrUseLastResponse
				}
				if len(via) >= httpMaxRedirects {
					return fmt.Errorf("stopped after %d redirects", httpMaxRedirects)
				}
				return nil
			}
			// 301, 302 and 303 would resend the POST as a GET without its
			// body: report the redirect instead.
			return http.ErrUseLastResponse
		},
	}
}

// sameOrigin reports whether a and b have the same scheme, host and port
// (a missing port is the scheme's default).
func sameOrigin(a, b *url.URL) bool {
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if strings.EqualFold(u.Scheme, "https") {
			return "443"
		}
		return "80"
	}
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

// drainAndClose reads what is left of a response body, up to httpDrainMax,
// and closes it, so the transport can reuse the connection.
func drainAndClose(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, httpDrainMax)
	_ = body.Close()
}

// readSnippet reads at most max bytes of r, cut at a UTF-8 character
// boundary if more followed.
func readSnippet(r io.Reader, max int) []byte {
	b, _ := io.ReadAll(io.LimitReader(r, int64(max)+1))
	if len(b) <= max {
		return b
	}
	return cutToRune(b[:max])
}

// parseRetryAfter reads a Retry-After header (RFC 9110 §10.2.3): a number
// of seconds or an HTTP date, either capped at queue.MaxVisibilityTimeout.
// It returns 0 for none or a date in the past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		if secs > int64(queue.MaxVisibilityTimeout/time.Second) {
			return queue.MaxVisibilityTimeout
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), queue.MaxVisibilityTimeout)
	}
	return 0
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether s has no control character but
// horizontal tab (RFC 9110 field-value).
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
