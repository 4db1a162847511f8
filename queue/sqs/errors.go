package sqs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// ErrQueueNotFound: the queue does not exist and the driver was told not to
// create it (create=false), or it was deleted while open.
var ErrQueueNotFound = errors.New("sqs: queue does not exist")

// ErrNoCredentials: the AWS credential chain found no credentials where
// it looked without asking the EC2 metadata service, which the driver does
// not ask when given an endpoint override (an emulator): see
// Config.Endpoint.
var ErrNoCredentials = errors.New("no AWS credentials")

// SQS error codes the driver maps, without the "AWS.SimpleQueueService."
// prefix of the query protocol's codes (SQS's JSON protocol may still
// give those, in its x-amzn-query-error header, and the SDK reports them).
var (
	codesQueueNotFound = []string{"QueueDoesNotExist", "NonExistentQueue"}
	codesReceipt       = []string{"ReceiptHandleIsInvalid", "MessageNotInflight"}
	codesThrottled     = []string{"RequestThrottled", "ThrottlingException", "Throttling", "KmsThrottled", "OverLimit"}
	codesTransient     = []string{"ServiceUnavailable", "InternalError", "InternalFailure", "RequestTimeout", "KmsInternalFailure"}
	codesPurging       = []string{"PurgeQueueInProgress"}
)

// queryPrefix starts the query protocol's SQS error codes.
const queryPrefix = "AWS.SimpleQueueService."

// PurgeInterval is how long SQS makes a second PurgeQueue of a queue wait
// (its API reference: "you can't purge a queue more than once every 60
// seconds"); a Clear refused for it is transient, with this as the hint.
const PurgeInterval = 60 * time.Second

// Error is a failed call to SQS. Its text gives the HTTP status and SQS's
// error code and message, never a credential (the portable queue names the
// operation and queue before it). errors.Is matches the queue error it maps
// to, and errors.As finds the SDK's smithy.APIError and
// *awshttp.ResponseError.
type Error struct {
	// Op is the SQS action ("ReceiveMessage" …) and Queue its queue.
	Op, Queue string
	// StatusCode is the HTTP status; 0 for a failure without a response.
	StatusCode int
	// Code is SQS's error code ("QueueDoesNotExist" …), if any.
	Code string
	// Message is SQS's error message, or the transport error's text.
	Message string

	kind error // the queue sentinel it maps to, if any
	err  error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.kind != nil {
		b.WriteString(e.kind.Error())
		b.WriteString(": ")
	}
	b.WriteString(e.Op)
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, ": HTTP %d", e.StatusCode)
	}
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
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

func hasCode(code string, codes []string) bool {
	code = strings.TrimPrefix(code, queryPrefix)
	for _, c := range codes {
		if code == c {
			return true
		}
	}
	return false
}

// classify turns an error of the SDK (or the HTTP transport under it) into
// the driver's: the contract's sentinels for the codes callers branch on,
// queue.Transient for what a retry may cure. A call whose ctx ended returns
// ctx's error (not transient: the caller gave up).
func classify(ctx context.Context, op, name string, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%s: %w", op, cerr)
	}
	e := &Error{Op: op, Queue: name, err: err}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		e.StatusCode = re.HTTPStatusCode()
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		e.Code = ae.ErrorCode()
		e.Message = firstLine(ae.ErrorMessage())
	}
	if e.StatusCode == 0 && e.Code == "" {
		e.Message = firstLine(transportMessage(err))
		var conn interface{ ConnectionError() bool }
		if errors.As(err, &conn) && conn.ConnectionError() {
			// No response: the request failed on the way (reset, refused,
			// closed). The outcome is unknown and a retry may succeed.
			return queue.Transient(e, 0)
		}
		if t, _ := driver.DefaultClassify(err); t {
			return queue.Transient(e, 0) // a timeout
		}
		// Failed before sending: no credentials, a bad endpoint. A
		// retry cannot cure it.
		return e
	}
	if e.Code == "" && e.StatusCode < 300 {
		// An answer that could not be read: the body cut off or garbled
		// on the way (the SDK checks its MD5). Whatever the receive
		// hid reappears after its visibility timeout; a retry may
		// succeed.
		e.Message = firstLine(transportMessage(err))
		return queue.Transient(e, 0)
	}
	switch {
	case hasCode(e.Code, codesQueueNotFound):
		e.kind = ErrQueueNotFound
		return e
	case hasCode(e.Code, codesReceipt):
		e.kind = queue.ErrReceiptMismatch
		return e
	case hasCode(e.Code, []string{"InvalidParameterValue"}) && strings.Contains(e.Message, "ReceiptHandle"):
		// SQS's answer to a ChangeMessageVisibility whose receipt handle
		// has expired or is not the newest.
		e.kind = queue.ErrReceiptMismatch
		return e
	case hasCode(e.Code, []string{"InvalidParameterValue"}) && strings.Contains(e.Message, "shorter than"):
		e.kind = queue.ErrTooLarge
		return e
	case hasCode(e.Code, codesPurging):
		return queue.Transient(e, PurgeInterval)
	case hasCode(e.Code, codesThrottled), e.StatusCode == http.StatusTooManyRequests:
		return queue.Transient(e, retryAfter(re))
	case hasCode(e.Code, codesTransient), e.StatusCode >= 500, e.StatusCode == http.StatusRequestTimeout:
		return queue.Transient(e, retryAfter(re))
	}
	return e
}

// retryAfter reads a Retry-After header in seconds, if the response has
// one.
func retryAfter(re *awshttp.ResponseError) time.Duration {
	if re == nil || re.Response == nil || re.Response.Response == nil {
		return 0
	}
	if s, err := strconv.Atoi(re.Response.Header.Get("Retry-After")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}

// transportMessage is the innermost error's text: the SDK's wrapping adds
// the operation and the endpoint's URL, the innermost names what failed.
func transportMessage(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err.Error()
		}
		err = u
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
