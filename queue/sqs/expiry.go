package sqs

import (
	"errors"
	"net/http"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go/middleware"
)

// SQS keeps no per-message time-to-live (only its queue's retention
// period), so the driver keeps adaptq's: the TTL rides in the AttrTTL
// attribute and a message's expiry is its SentTimestamp (SQS's clock) plus
// it. Whether that time has come is judged by SQS's clock too, never by
// this process's: each answer's Date header is SQS's time when it
// answered, in whole seconds rounded down, so it is never later than SQS's
// own time and a message SQS still keeps as live is never judged expired,
// whatever this process's clock says (the price: an expired message may
// live up to a second longer). An answer without a Date judges nothing
// expired.

// serverNow is SQS's time when it sent the answer whose metadata md is.
func serverNow(md middleware.Metadata) (time.Time, bool) {
	t, ok := awsmiddleware.GetServerTime(md)
	return t, ok && !t.IsZero()
}

// serverNowOf is serverNow of the answer a call failed with, if it had one.
func serverNowOf(err error) (time.Time, bool) {
	var re *awshttp.ResponseError
	if !errors.As(err, &re) || re.Response == nil || re.Response.Response == nil {
		return time.Time{}, false
	}
	t, perr := http.ParseTime(re.Response.Header.Get("Date"))
	return t, perr == nil && !t.IsZero()
}

// expiredAt reports whether a message that expires at expires (zero: never)
// is past its TTL at now, SQS's time.
func expiredAt(expires, now time.Time) bool {
	return !expires.IsZero() && !now.Before(expires)
}
