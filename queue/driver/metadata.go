package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"unicode/utf8"
)

// MetadataLimits bound a message's metadata on one backend
// (Features.Metadata). The portable queue checks them on every Put before
// anything is written. Keys follow one rule on every backend, SQS's for
// message attribute names (CheckMetadataKey), so metadata that one engine
// accepts moves to another unchanged within the smaller limits.
type MetadataLimits struct {
	// MaxPairs is the most key/value pairs a message carries; 0 when the
	// driver stores no metadata, and then any is refused.
	MaxPairs int
	// MaxKey is the longest key in bytes, at most MaxMetadataKey.
	MaxKey int
	// MaxValue is the longest value in bytes.
	MaxValue int
	// InBody is set when the backend counts metadata against the message
	// size (SQS's attributes; Azure's envelope): a Put's body plus
	// MetadataSize(md, PairOverhead) must then fit Features.MaxBody.
	InBody bool
	// PairOverhead is what each pair costs beyond its key and value when
	// InBody (SQS: the data type's name, "String").
	PairOverhead int
}

// The limits of the engines that store metadata in their own storage
// (memory, SQLite, PostgreSQL, Redis). They are a choice of adaptq's, not
// the backends': SQS's attribute-name length for keys, enough for W3C
// trace context's tracestate (512 characters) in values, and a cap on the
// count that keeps metadata small beside the body.
const (
	// MaxMetadataKey is the longest key any backend accepts (SQS: an
	// attribute name is up to 256 characters).
	MaxMetadataKey = 256
	// DefaultMetadataPairs is the most pairs the embedded and self-hosted
	// engines store per message.
	DefaultMetadataPairs = 64
	// DefaultMetadataValue is their longest value in bytes.
	DefaultMetadataValue = 4096
)

// ReservedMetadataPrefix starts the names of adaptq's own message
// attributes on SQS (adaptq-encoding, adaptq-ttl): no key may start with
// it, in any case.
const ReservedMetadataPrefix = "adaptq-"

// DefaultMetadataLimits are the limits of the engines that keep metadata
// in their own storage.
var DefaultMetadataLimits = MetadataLimits{MaxPairs: DefaultMetadataPairs, MaxKey: MaxMetadataKey, MaxValue: DefaultMetadataValue}

// ErrInvalidMetadata: a Put's metadata breaks the backend's limits or the
// key rule. The error is a *MetadataError naming the key and the limit.
var ErrInvalidMetadata = errors.New("queue: invalid metadata")

// MetadataError is the typed error of metadata a Put refused: nothing was
// written. errors.Is matches it to ErrInvalidMetadata always, and to
// ErrTooLarge when a size is over its limit.
type MetadataError struct {
	// Key is the offending key ("" when the whole map is at fault: too
	// many pairs, or too large with the body).
	Key string
	// Limit names the limit broken: "pairs", "key size", "value size",
	// "body size", "key characters", "value characters", "empty value" or
	// "unsupported".
	Limit string
	// Max is the limit's figure and Got the message's, for the size and
	// count limits (0 otherwise).
	Max, Got int
}

func (e *MetadataError) Error() string {
	var b strings.Builder
	b.WriteString("queue: invalid metadata: ")
	if e.Key != "" {
		fmt.Fprintf(&b, "key %q: ", e.Key)
	}
	switch e.Limit {
	case "pairs":
		fmt.Fprintf(&b, "%d pairs is over the limit of %d", e.Got, e.Max)
	case "key size", "value size":
		fmt.Fprintf(&b, "%s %d bytes is over the limit of %d", e.Limit, e.Got, e.Max)
	case "body size":
		fmt.Fprintf(&b, "body and metadata of %d bytes are over the limit of %d", e.Got, e.Max)
	case "key characters":
		b.WriteString("a key is 1 to 256 of A-Z a-z 0-9 _ - . (SQS's attribute names): no leading, trailing or double '.', no 'aws.', 'amazon.' or 'adaptq-' prefix")
	case "value characters":
		b.WriteString("a value is UTF-8 text of characters XML 1.0 allows (SQS's rule: no control characters but tab, LF and CR)")
	case "empty value":
		b.WriteString("an empty value (SQS refuses one): leave the key out")
	case "unsupported":
		b.WriteString("this backend stores no metadata")
	default:
		b.WriteString(e.Limit)
	}
	return b.String()
}

// Is matches ErrInvalidMetadata, and ErrTooLarge for a size over its limit.
func (e *MetadataError) Is(target error) bool {
	switch target {
	case ErrInvalidMetadata:
		return true
	case ErrTooLarge:
		return e.Limit == "key size" || e.Limit == "value size" || e.Limit == "body size" || e.Limit == "pairs"
	}
	return false
}

// MetadataSize is the bytes md costs: its keys and values, and overhead
// per pair.
func MetadataSize(md map[string]string, overhead int) int {
	n := 0
	for k, v := range md {
		n += len(k) + len(v) + overhead
	}
	return n
}

// CheckMetadata checks md against lim and the key and value rules, and
// bodyLen with it against maxBody when lim.InBody. Of several offending
// keys it names the least, so the error is the same every time. An empty
// or nil md is always accepted.
func CheckMetadata(md map[string]string, lim MetadataLimits, bodyLen, maxBody int) error {
	if len(md) == 0 {
		return nil
	}
	if lim.MaxPairs <= 0 {
		return &MetadataError{Limit: "unsupported"}
	}
	if len(md) > lim.MaxPairs {
		return &MetadataError{Limit: "pairs", Max: lim.MaxPairs, Got: len(md)}
	}
	var worst *MetadataError
	for k, v := range md {
		if worst != nil && k >= worst.Key {
			continue
		}
		if e := checkPair(k, v, lim); e != nil {
			worst = e
		}
	}
	if worst != nil {
		return worst
	}
	if lim.InBody {
		if n := bodyLen + MetadataSize(md, lim.PairOverhead); n > maxBody {
			return &MetadataError{Limit: "body size", Max: maxBody, Got: n}
		}
	}
	return nil
}

func checkPair(k, v string, lim MetadataLimits) *MetadataError {
	maxKey := min(lim.MaxKey, MaxMetadataKey)
	if maxKey <= 0 {
		maxKey = MaxMetadataKey
	}
	switch {
	case len(k) > maxKey:
		return &MetadataError{Key: k, Limit: "key size", Max: maxKey, Got: len(k)}
	case !ValidMetadataKey(k):
		return &MetadataError{Key: k, Limit: "key characters"}
	case v == "":
		return &MetadataError{Key: k, Limit: "empty value"}
	case lim.MaxValue > 0 && len(v) > lim.MaxValue:
		return &MetadataError{Key: k, Limit: "value size", Max: lim.MaxValue, Got: len(v)}
	case !validMetadataValue(v):
		return &MetadataError{Key: k, Limit: "value characters"}
	}
	return nil
}

// ValidMetadataKey reports whether k follows SQS's rule for message
// attribute names, which every backend applies: 1 to 256 characters of
// A-Z, a-z, 0-9, '_', '-' and '.'; no '.' first, last or twice in a row;
// no "aws." or "amazon." prefix in any case (reserved by AWS), nor
// "adaptq-" (the SQS driver's own attributes).
func ValidMetadataKey(k string) bool {
	if k == "" || len(k) > MaxMetadataKey || k[0] == '.' || k[len(k)-1] == '.' || strings.Contains(k, "..") {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	l := strings.ToLower(k)
	return !strings.HasPrefix(l, "aws.") && !strings.HasPrefix(l, "amazon.") && !strings.HasPrefix(l, ReservedMetadataPrefix)
}

// validMetadataValue: valid UTF-8 of the characters XML 1.0 allows, which
// SQS requires of a String attribute (#x9 | #xA | #xD | #x20-#xD7FF |
// #xE000-#xFFFD | #x10000-#x10FFFF).
func validMetadataValue(v string) bool {
	for i := 0; i < len(v); {
		c := v[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\t' && c != '\n' && c != '\r' {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(v[i:])
		if r == utf8.RuneError && n == 1 || r == 0xFFFE || r == 0xFFFF {
			return false
		}
		i += n
	}
	return true
}

// CloneMetadata is a copy of md, nil when md is empty: what a driver keeps
// of a Put's metadata and hands out with a message.
func CloneMetadata(md map[string]string) map[string]string {
	if len(md) == 0 {
		return nil
	}
	return maps.Clone(md)
}

// EncodeMetadata is md as the JSON object drivers keep in their own
// storage (keys sorted), nil for empty md: a message without metadata
// stores nothing.
func EncodeMetadata(md map[string]string) []byte {
	if len(md) == 0 {
		return nil
	}
	b, err := json.Marshal(md)
	if err != nil {
		panic(err) // a map of strings always marshals
	}
	return b
}

// DecodeMetadata reads what EncodeMetadata wrote: nil for nil or empty b.
func DecodeMetadata(b []byte) (map[string]string, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var md map[string]string
	if err := json.Unmarshal(b, &md); err != nil {
		return nil, fmt.Errorf("stored metadata: %w", err)
	}
	if len(md) == 0 {
		return nil, nil
	}
	return md, nil
}

// MetadataFitter is a driver whose own check of a put's metadata is finer
// than CheckMetadata's estimate (Azure's metadata envelope is JSON in
// front of the body, larger than its keys and values). FitMetadata returns
// an error when a put of body with md would fail for md's size, or would
// be stored otherwise than a put of body alone (an inline body moved to a
// claim-check blob). Tracing asks it before adding trace context to a
// put's metadata, so that a put never fails, nor costs more, for
// tracing's sake.
type MetadataFitter interface {
	FitMetadata(body []byte, md map[string]string) error
}
