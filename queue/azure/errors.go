package azure

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/adaptq/adaptq/queue"
)

// ErrQueueNotFound: the queue does not exist and the driver was told not to
// create it (create=false).
var ErrQueueNotFound = errors.New("azure: queue does not exist")

// ErrContainerNotFound: the claim-check container does not exist: a Put
// with create=false, or a Get of a message whose payload is in it (a
// configuration error, not a lost payload: see the package doc).
var ErrContainerNotFound = errors.New("azure: payload container does not exist")

// Azure Storage error codes the driver maps (x-ms-error-code).
const (
	codePopReceiptMismatch    = "PopReceiptMismatch"
	codeMessageNotFound       = "MessageNotFound"
	codeQueueNotFound         = "QueueNotFound"
	codeQueueBeingDeleted     = "QueueBeingDeleted"
	codeMessageTooLarge       = "MessageTooLarge"
	codeRequestBodyTooLarge   = "RequestBodyTooLarge"
	codeServerBusy            = "ServerBusy"
	codeContainerNotFound     = "ContainerNotFound"
	codeContainerExists       = "ContainerAlreadyExists"
	codeContainerBeingDeleted = "ContainerBeingDeleted"
	codeBlobNotFound          = "BlobNotFound"
)

// Error is a failed call to Azure Storage. Its text gives the HTTP status
// and Azure's error code and message, never a URL's query or a credential
// (the portable queue names the operation and the queue before it). errors.Is matches the queue error it maps to
// (queue.ErrNotFound for MessageNotFound …), and errors.As finds the SDK's
// *azcore.ResponseError for the raw response.
type Error struct {
	// Op is the driver operation ("get", "delete" …) and Queue its queue.
	Op, Queue string
	// StatusCode is the HTTP status; 0 for a failure without a response
	// (a reset connection, a timeout).
	StatusCode int
	// Code is Azure's x-ms-error-code ("PopReceiptMismatch" …), if any.
	Code string
	// Message is the first line of Azure's error message, or the transport
	// error's text.
	Message string
	// RetryAfter is the server's Retry-After hint, if it gave one.
	RetryAfter time.Duration
	// Hint, for a refused credential (ErrAuth), is Azure's
	// AuthenticationErrorDetail and what to fix (see auth.go).
	Hint string

	kind error // the queue sentinel it maps to, if any
	err  error // the SDK's or transport's error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.kind != nil {
		b.WriteString(e.kind.Error())
		b.WriteString(": ")
	}
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, "HTTP %d", e.StatusCode)
		if e.Code != "" {
			b.WriteString(" " + e.Code)
		}
		if e.Message != "" {
			b.WriteString(": " + e.Message)
		}
	} else {
		b.WriteString(e.Message)
	}
	if e.Hint != "" {
		b.WriteString("; " + e.Hint)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	return b.String()
}

// Unwrap returns the queue sentinel and the underlying error.
func (e *Error) Unwrap() []error {
	if e.kind != nil {
		return []error{e.kind, e.err}
	}
	return []error{e.err}
}

// classify turns an error of the SDK (or the HTTP transport under it) into
// the driver's error: the contract's sentinels for the codes callers branch
// on, queue.Transient for what a retry may cure. ctx is the caller's: if it
// ended, its error is returned as is (a cancelled call is not transient).
func classify(ctx context.Context, op, name string, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	e := &Error{Op: op, Queue: name, err: err}
	if ce := (*CredentialError)(nil); errors.As(err, &ce) {
		return credentialFailed(e, ce)
	}
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		// No response: the request failed on the way (reset, refused,
		// dropped connection, try timeout). The outcome is unknown and a
		// retry may succeed.
		e.Message = transportMessage(err)
		return queue.Transient(e, 0)
	}
	e.StatusCode = re.StatusCode
	e.Code = re.ErrorCode
	if re.RawResponse != nil {
		e.Message = firstLine(responseMessage(re))
		e.RetryAfter = retryAfter(re.RawResponse.Header)
	}
	if explainAuth(e, re) {
		return e
	}
	switch e.Code {
	case codePopReceiptMismatch:
		e.kind = queue.ErrReceiptMismatch
		return e
	case codeMessageNotFound:
		e.kind = queue.ErrNotFound
		return e
	case codeQueueNotFound:
		e.kind = ErrQueueNotFound
		return e
	case codeContainerNotFound:
		e.kind = ErrContainerNotFound
		return e
	case codeMessageTooLarge, codeRequestBodyTooLarge:
		e.kind = queue.ErrTooLarge
		return e
	}
	switch re.StatusCode {
	case http.StatusTooManyRequests:
		return queue.Throttled(e, e.RetryAfter)
	case http.StatusRequestTimeout, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		// 503 ServerBusy is Azure Storage's throttling answer. Without a
		// Retry-After the caller's own backoff applies, as in the Azure
		// SDK's retry policy (the worker thread governance post's 10 s is SQL Azure's rule).
		return queue.Transient(e, e.RetryAfter)
	}
	return e
}

// responseMessage reads Azure's <Message> from the error body the SDK kept,
// if it is there.
func responseMessage(re *azcore.ResponseError) string {
	s := re.Error()
	// The SDK's text is the method and URL path, the status, the code and
	// the raw body; the body's <Message> is the useful part.
	if i := strings.Index(s, "<Message>"); i >= 0 {
		s = s[i+len("<Message>"):]
		if j := strings.Index(s, "</Message>"); j >= 0 {
			s = s[:j]
		}
		return strings.TrimSpace(s)
	}
	return http.StatusText(re.StatusCode)
}

func firstLine(s string) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	const max = 200
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

// transportMessage describes a failure without a response. A *url.Error
// names the request URL, whose query may hold a SAS: keep only the method,
// the path and the cause.
func transportMessage(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		path := ue.URL
		if u, perr := url.Parse(ue.URL); perr == nil {
			path = u.Host + u.Path
		} else if i := strings.IndexByte(path, '?'); i >= 0 {
			path = path[:i]
		}
		return fmt.Sprintf("%s %s: %v", ue.Op, path, ue.Err)
	}
	return err.Error()
}

// retryAfter parses a Retry-After header (seconds or an HTTP date) and
// Azure's x-ms-retry-after-ms.
func retryAfter(h http.Header) time.Duration {
	if v := h.Get("x-ms-retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// hasCode reports whether err is a driver error with one of codes.
func hasCode(err error, codes ...string) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	for _, c := range codes {
		if e.Code == c {
			return true
		}
	}
	return false
}
