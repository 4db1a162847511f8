// Package poison owns what a poison queue holds and the tools that work on
// it. The listener moves a message that cannot be processed (Azure
// Functions' rule: a permanent failure, or a failure at the maximum dequeue
// count) to its queue's poison queue; a driver chooses the id of every
// message it stores, so the poison message cannot keep the original's id
// or dequeue count by itself. Encode wraps the original body in a small
// versioned envelope that carries them, with the failure's reason and
// time, and Decode reads it back (and reads a bare body, written before the
// envelope existed, as a message whose metadata is unknown).
//
// List, Find, Requeue and Purge work on a poison queue through the portable
// queue.Queue, so they work on every backend: the CLI's "adaptq poison"
// commands and the worker's admin routes are thin layers over them.
//
// The envelope is text, so it travels on every backend a body did:
//
//	adaptq-poison/1 {"id":"…","queue":"orders","dequeue_count":5,…}\n<the original body, byte for byte>
//
// The first line is the magic prefix and a one-line JSON header (control
// characters escaped); everything after the first newline is the original
// body verbatim, its length recorded in the header as "size".
//
// # Nothing is poisoned bare
//
// The tools read a header only from the start of a poison message, and a
// producer chooses every byte of a body: a body poisoned as it is could
// imitate an envelope and name another queue and another body. So the
// listener never puts a body bare. A body too large for the envelope
// within the poison queue's limit is wrapped compressed
// ("adaptq-poison/2", "encoding":"deflate-base64"), and if even that does not
// fit, its first bytes are kept with its size and SHA-256
// ("truncated":true): such a message can be read and purged, never
// requeued. Whatever a body holds, the header the tools read is the one
// adaptq wrote, and a requeue puts back the original bytes or nothing. (A
// poison queue written by an adaptq before this rule, or by another
// program, may hold bare bodies; Decode reads those as envelopes when they
// look like one, and whoever can write to the poison queue directly can
// write any envelope: see Requeue's Dest for what is still checked.)
//
// The listener's one exception: a limit too small for any header (under a
// few hundred bytes) puts a body bare when it does not start with
// MagicPrefix, which Decode never reads as an envelope; one that does
// start with it stays in its queue (EncodeOrBare).
package poison

import (
	"bytes"
	"compress/flate"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/adaptq/adaptq/queue"
)

// Magic starts every enveloped poison message whose body follows its
// header verbatim: the format's name and version, then a space and the JSON
// header.
const Magic = "adaptq-poison/1 "

// Magic2 starts an envelope whose body is not verbatim: compressed
// ("encoding":"deflate-base64") or cut short ("truncated":true). An older adaptq
// reads it as a bare body rather than mistaking the compressed bytes for
// the original.
const Magic2 = "adaptq-poison/2 "

// MagicPrefix is what every version's magic starts with. A body that
// starts with it is never put to a poison queue bare (see EncodeOrBare).
const MagicPrefix = "adaptq-poison/"

// maxInflated bounds what Decode inflates: a compressed envelope is never
// larger than a poison queue's body limit, and no backend takes a body
// over a few MiB, so a header that claims more is not adaptq's.
const maxInflated = 64 << 20

// MaxReason is the most bytes of a failure's reason the envelope keeps: an
// error's first kilobyte names what failed; a handler that returns a
// whole response body as its error must not fill the poison queue with it.
const MaxReason = 1024

// truncated marks a reason that was cut short.
const truncated = "…"

// Rule is why the listener poisoned a message.
type Rule string

// The rules (Azure Functions' poison rules).
const (
	// RulePermanent: the handler returned a permanent failure
	// (handler.Permanent); the message was poisoned at once.
	RulePermanent Rule = "permanent"
	// RuleMaxDequeue: the handler failed at the maximum dequeue count.
	RuleMaxDequeue Rule = "max_dequeue_count"
	// RuleOverMaxDequeue: the message arrived with a dequeue count above
	// the maximum and was poisoned without running (its earlier runs
	// ended without a verdict: a crash, a lost lease, a failed move).
	RuleOverMaxDequeue Rule = "over_max_dequeue_count"
	// RuleExpiring: the message could not be retried before its
	// time-to-live ended (a server's Retry-After outlasted it, too little
	// was left for a retry of at least listener.MinRetryHide, or it expired
	// while its handler ran), so it was poisoned rather than lost; the
	// reason says which.
	RuleExpiring Rule = "expiring"
)

// Message is one message of a poison queue: the original message's
// identity and last failure, read from the envelope, and the poison
// message's own id.
type Message struct {
	// PoisonID is the poison message's id in the poison queue: what Find,
	// Requeue and Purge take (they take the original ID too).
	PoisonID string
	// PoisonedAt is when the poison message was put (its InsertedAt).
	PoisonedAt time.Time

	// ID is the original message's id in its queue.
	ID string
	// Queue is the name of the queue the message was poisoned from.
	Queue string
	// DequeueCount is the original's dequeue count when it was poisoned.
	DequeueCount int
	// Rule is why it was poisoned; Reason the last failure's error text
	// (at most MaxReason bytes).
	Rule   Rule
	Reason string
	// FailedAt is when the listener poisoned it.
	FailedAt time.Time
	// InsertedAt and ExpiresAt are the original's (ExpiresAt zero: it
	// never expired).
	InsertedAt time.Time
	ExpiresAt  time.Time

	// Body is the original body, byte for byte; Size its length (kept when
	// a listing leaves the body out).
	Body []byte
	Size int
	// Truncated is set when the original body did not fit in the poison
	// queue even compressed: Body holds only its first bytes, Size is the
	// whole body's length and SHA256 its digest (hex). Such a message
	// cannot be requeued (its body would not be the original).
	Truncated bool
	SHA256    string

	// Metadata is the original's metadata (nil for none), put back with
	// it by Requeue. MetadataDropped is set when it did not fit in the
	// poison queue's limit beside the header and the body, even
	// compressed, and was left out (the reason is cut first).
	Metadata        map[string]string
	MetadataDropped bool

	// Enveloped is false for a poison message without the envelope
	// (written before it existed, by another program, or moved by the
	// backend's own redrive, as SQS's RedrivePolicy does): its body is the
	// whole poison message, its Metadata the poison message's own (SQS
	// moves the attributes with the message), and every field above but
	// PoisonID, PoisonedAt, Body, Size and Metadata is unknown.
	Enveloped bool
}

// header is the envelope's JSON line.
type header struct {
	ID           string     `json:"id"`
	Queue        string     `json:"queue"`
	DequeueCount int        `json:"dequeue_count"`
	Rule         Rule       `json:"rule,omitempty"`
	Reason       string     `json:"reason,omitempty"`
	FailedAt     time.Time  `json:"failed_at"`
	InsertedAt   time.Time  `json:"inserted_at"`
	ExpiresAt    *time.Time `json:"expires_at,omitempty"`
	Size         int        `json:"size"`
	// Metadata is the original's (absent for none); MetadataDropped says
	// it was left out for the limit. Both versions carry them.
	Metadata        map[string]string `json:"metadata,omitempty"`
	MetadataDropped bool              `json:"metadata_dropped,omitempty"`
	// Version 2 only (Magic2): what follows the header is Stored bytes,
	// the body compressed (Encoding "deflate-base64": raw DEFLATE in
	// standard base64, so that the envelope of a text body stays text) or
	// its first Stored bytes, cut between characters
	// (Truncated, with SHA256 the whole body's digest).
	Encoding  string `json:"encoding,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	Stored    int    `json:"stored,omitempty"`
	SHA256    string `json:"sha256,omitempty"`
}

// ErrTooLarge: not even the envelope's header, with no reason and no body,
// fits in the poison queue's body limit (a limit of a few hundred bytes).
// See EncodeOrBare for what the listener then does.
var ErrTooLarge = fmt.Errorf("poison envelope: %w", queue.ErrTooLarge)

// ErrImitation: EncodeOrBare was given a body that starts with MagicPrefix
// and too large a body for any envelope: put bare it would read as an
// envelope, so it is not poisoned.
var ErrImitation = errors.New("poison envelope: the body starts like a poison envelope and no envelope fits the poison queue's limit; it is not put bare")

// Encode wraps m's body and metadata in the envelope. The reason is
// cleaned (invalid UTF-8 and control characters become U+FFFD, so the
// header is text every backend carries) and cut to MaxReason bytes, and cut
// further if the envelope would exceed maxBody bytes (0: no limit). A body
// that does not fit verbatim is compressed (Magic2, "deflate-base64"), and one
// that does not fit compressed either is cut short (Magic2, "truncated":
// its first bytes, its size and SHA-256). If not even the header fits,
// Encode returns ErrTooLarge.
func Encode(m Message, maxBody int) ([]byte, error) {
	h := header{
		ID: m.ID, Queue: m.Queue, DequeueCount: m.DequeueCount, Rule: m.Rule,
		Reason:   cutReason(cleanReason(m.Reason), MaxReason),
		FailedAt: m.FailedAt.UTC(), InsertedAt: m.InsertedAt.UTC(), Size: len(m.Body),
		Metadata: m.Metadata, MetadataDropped: m.MetadataDropped,
	}
	if len(h.Metadata) == 0 {
		h.Metadata = nil
	}
	if !m.ExpiresAt.IsZero() {
		t := m.ExpiresAt.UTC()
		h.ExpiresAt = &t
	}
	if out, err := envelope(Magic, h, m.Body, maxBody, false); !errors.Is(err, ErrTooLarge) {
		return out, err
	}
	z := deflate(m.Body)
	hz := h
	hz.Encoding, hz.Stored = encDeflate, len(z)
	if out, err := envelope(Magic2, hz, z, maxBody, false); !errors.Is(err, ErrTooLarge) {
		return out, err
	}
	if h.Metadata != nil {
		// The body does not fit beside the metadata, verbatim or
		// compressed: the metadata is left out before the body is cut.
		if out, err := envelope(Magic, h, m.Body, maxBody, true); !errors.Is(err, ErrTooLarge) {
			return out, err
		}
		if out, err := envelope(Magic2, hz, z, maxBody, true); !errors.Is(err, ErrTooLarge) {
			return out, err
		}
	}
	// Cut short: as much of the body as fits beside the header. The
	// header is measured with stored at its largest, so it only shrinks.
	sum := sha256.Sum256(m.Body)
	ht := h
	ht.Truncated, ht.Stored, ht.SHA256 = true, len(m.Body), hex.EncodeToString(sum[:])
	line, err := fitHeader(&ht, maxBody)
	if err != nil {
		return nil, err
	}
	keep := max(min(maxBody-len(Magic2)-len(line), len(m.Body)-1), 0)
	// Cut between characters: a text body's first bytes stay text.
	for back := 0; back < utf8.UTFMax && keep > 0 && !utf8.RuneStart(m.Body[keep]); back++ {
		keep--
	}
	ht.Stored = keep
	return envelope(Magic2, ht, m.Body[:ht.Stored], maxBody, true)
}

// EncodeOrBare is what the listener puts to a poison queue: Encode's
// envelope, or, where the limit leaves no room for any header (a few
// hundred bytes), the bare body if it does not start with MagicPrefix
// (Decode reads it as a bare body with unknown metadata). A body that
// starts with it is refused (ErrImitation): put bare, its first line would
// be read as a header a producer wrote.
func EncodeOrBare(m Message, maxBody int) (body []byte, bare bool, err error) {
	b, err := Encode(m, maxBody)
	if err == nil {
		return b, false, nil
	}
	if !errors.Is(err, ErrTooLarge) {
		return nil, false, err
	}
	if bytes.HasPrefix(m.Body, []byte(MagicPrefix)) {
		return nil, false, fmt.Errorf("%w (%v)", ErrImitation, err)
	}
	return m.Body, true, nil
}

// envelope writes magic, h and payload, cutting h's reason until it fits
// in maxBody (0: no limit), then, with dropMeta, leaving out its metadata;
// ErrTooLarge if it does not fit without them.
func envelope(magic string, h header, payload []byte, maxBody int, dropMeta bool) ([]byte, error) {
	for {
		line, err := marshalHeader(h)
		if err != nil {
			return nil, err
		}
		n := len(magic) + len(line) + len(payload) // line ends with its newline
		if maxBody <= 0 || n <= maxBody {
			out := make([]byte, 0, n)
			out = append(append(append(out, magic...), line...), payload...)
			return out, nil
		}
		if h.Reason == "" && h.Metadata != nil && dropMeta {
			h.Metadata, h.MetadataDropped = nil, true // the reason went first
			continue
		}
		if h.Reason == "" {
			return nil, fmt.Errorf("%w: %d bytes of body and header, the limit is %d", ErrTooLarge, n, maxBody)
		}
		// Escaping may make the reason longer in JSON than in bytes: cut
		// the excess and measure again.
		h.Reason = cutReason(h.Reason, max(len(h.Reason)-(n-maxBody)-len(truncated), 0))
	}
}

// fitHeader cuts h's reason until Magic2 and h's line leave room for at
// least one byte of body within maxBody, and returns the line.
func fitHeader(h *header, maxBody int) ([]byte, error) {
	for {
		line, err := marshalHeader(*h)
		if err != nil {
			return nil, err
		}
		n := len(Magic2) + len(line) + 1
		if maxBody <= 0 || n <= maxBody {
			return line, nil
		}
		if h.Reason == "" && h.Metadata != nil {
			h.Metadata, h.MetadataDropped = nil, true
			continue
		}
		if h.Reason == "" {
			return nil, fmt.Errorf("%w: a header of %d bytes, the limit is %d", ErrTooLarge, n-1, maxBody)
		}
		h.Reason = cutReason(h.Reason, max(len(h.Reason)-(n-maxBody)-len(truncated), 0))
	}
}

// encDeflate is the Encoding of a compressed envelope's body.
const encDeflate = "deflate-base64"

// deflate compresses b (raw DEFLATE, best compression) and writes it in
// standard base64: text, as every envelope is.
func deflate(b []byte) []byte {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestCompression) // the level is valid
	_, _ = w.Write(b)                                    // a bytes.Buffer does not fail
	_ = w.Close()
	out := make([]byte, base64.StdEncoding.EncodedLen(buf.Len()))
	base64.StdEncoding.Encode(out, buf.Bytes())
	return out
}

// inflate decompresses z, which must hold exactly size bytes.
// The buffer grows with what the stream really holds, never to a size a
// header merely claims.
func inflate(z []byte, size int) ([]byte, bool) {
	if size < 0 || size > maxInflated {
		return nil, false
	}
	raw := make([]byte, base64.StdEncoding.DecodedLen(len(z)))
	n, err := base64.StdEncoding.Decode(raw, z)
	if err != nil {
		return nil, false
	}
	r := flate.NewReader(bytes.NewReader(raw[:n]))
	defer r.Close()
	var buf bytes.Buffer
	buf.Grow(min(size, 4*len(z)+512))
	if _, err := io.Copy(&buf, io.LimitReader(r, int64(size)+1)); err != nil || buf.Len() != size {
		return nil, false
	}
	return buf.Bytes(), true
}

// inflatePrefix decompresses the first n bytes of z, which must hold at
// least that many.
func inflatePrefix(z []byte, n int) ([]byte, bool) {
	raw := make([]byte, base64.StdEncoding.DecodedLen(len(z)))
	k, err := base64.StdEncoding.Decode(raw, z)
	if err != nil {
		return nil, false
	}
	r := flate.NewReader(bytes.NewReader(raw[:k]))
	defer r.Close()
	out := make([]byte, n)
	if _, err := io.ReadFull(r, out); err != nil {
		return nil, false
	}
	return out, true
}

// marshalHeader writes h as one JSON line ending in a newline, without
// HTML escaping (the header is not HTML).
func marshalHeader(h header) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(h); err != nil {
		return nil, fmt.Errorf("poison envelope: %w", err)
	}
	return buf.Bytes(), nil
}

// cleanReason makes s valid UTF-8 without control characters or
// non-characters, so that the header is text any backend carries (Azure's
// text encoding refuses what XML cannot hold).
func cleanReason(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return ' '
		case unicode.IsControl(r), r == 0xFFFE, r == 0xFFFF, r >= 0xD800 && r <= 0xDFFF:
			return '\uFFFD'
		}
		return r
	}, s)
}

// cutReason cuts s to at most n bytes, at a character boundary, marking a
// cut with an ellipsis (within the n bytes).
func cutReason(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n < len(truncated) {
		return ""
	}
	n -= len(truncated)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + truncated
}

// Decode reads a message of a poison queue. A body with the envelope gives
// the original's metadata and body (inflated, for a compressed one); any
// other body (written before the envelope, or by another program, or an
// envelope whose header does not parse or whose size does not match) is
// returned whole as a bare body with Enveloped false. Decode never fails:
// no poison message is unreadable.
func Decode(pm *queue.Message) Message { return decodeN(pm, maxInflated) }

// MaxPreview is the most bytes of a compressed body a listing with bodies
// (ListBodies, PeekBodies) inflates: enough for any preview, so that a page
// of envelopes that each inflate to many MiB costs what a page of small
// ones does. Such a message's Body is its first MaxPreview bytes; Size
// says how large it is, and Find gives it whole.
const MaxPreview = 64 << 10

// decode is Decode; without bodies, it does not inflate a compressed body
// (a listing shows its size from the header and drops the body), so that
// a listing's cost does not grow with what the bodies claim to hold.
func decode(pm *queue.Message, bodies bool) Message {
	if bodies {
		return decodeN(pm, MaxPreview)
	}
	return decodeN(pm, 0)
}

// decodeN is Decode inflating at most upTo bytes of a compressed body (0:
// none; the body is then the compressed bytes, unchecked).
func decodeN(pm *queue.Message, upTo int) Message {
	m := Message{PoisonID: pm.ID, PoisonedAt: pm.InsertedAt, Body: pm.Body, Size: len(pm.Body)}
	h, body, ok := parse(pm.Body, upTo)
	if !ok {
		m.Metadata = pm.Metadata // a bare message's own, which Requeue puts back
		return m
	}
	m.ID, m.Queue, m.DequeueCount, m.Rule, m.Reason = h.ID, h.Queue, h.DequeueCount, h.Rule, h.Reason
	m.FailedAt, m.InsertedAt = h.FailedAt, h.InsertedAt
	if h.ExpiresAt != nil {
		m.ExpiresAt = *h.ExpiresAt
	}
	m.Body, m.Size, m.Enveloped = body, h.Size, true
	if len(h.Metadata) > 0 {
		m.Metadata = h.Metadata
	}
	m.MetadataDropped = h.MetadataDropped
	if h.Truncated {
		m.Truncated, m.SHA256 = true, h.SHA256
	}
	return m
}

// parse splits an envelope into its header and the original body (its
// first bytes, for a truncated one). A compressed body is inflated up to
// its first upTo bytes (checked whole only if it is no larger); with upTo
// 0 it is returned as it is stored, unchecked.
func parse(b []byte, upTo int) (header, []byte, bool) {
	var h header
	v2 := bytes.HasPrefix(b, []byte(Magic2))
	rest, ok := bytes.CutPrefix(b, []byte(Magic))
	if v2 {
		rest, ok = bytes.CutPrefix(b, []byte(Magic2))
	}
	if !ok {
		return h, nil, false
	}
	line, body, ok := bytes.Cut(rest, []byte{'\n'})
	if !ok {
		return h, nil, false
	}
	if err := json.Unmarshal(line, &h); err != nil || h.ID == "" {
		return h, nil, false
	}
	switch {
	case !v2:
		// Version 1 is the body verbatim, whatever else the header says.
		h.Encoding, h.Truncated, h.Stored, h.SHA256 = "", false, 0, ""
		return h, body, h.Size == len(body)
	case h.Stored != len(body):
		return h, nil, false
	case h.Truncated:
		sum, err := hex.DecodeString(h.SHA256)
		return h, body, h.Encoding == "" && h.Size > len(body) && err == nil && len(sum) == sha256.Size
	case h.Encoding == encDeflate && upTo <= 0:
		return h, body, h.Size >= 0 && h.Size <= maxInflated
	case h.Encoding == encDeflate && h.Size > upTo && h.Size <= maxInflated:
		out, ok := inflatePrefix(body, upTo)
		return h, out, ok
	case h.Encoding == encDeflate:
		out, ok := inflate(body, h.Size)
		return h, out, ok
	}
	return h, nil, false
}

// messageJSON is a Message as the admin API and "adaptq poison --json"
// write it: times in RFC 3339 (null when unknown), the body as text when
// it is valid UTF-8, else base64.
type messageJSON struct {
	PoisonID        string            `json:"poison_id"`
	PoisonedAt      *time.Time        `json:"poisoned_at"`
	ID              string            `json:"id,omitempty"`
	Queue           string            `json:"queue,omitempty"`
	DequeueCount    int               `json:"dequeue_count"`
	Rule            Rule              `json:"rule,omitempty"`
	Reason          string            `json:"reason,omitempty"`
	FailedAt        *time.Time        `json:"failed_at"`
	InsertedAt      *time.Time        `json:"inserted_at"`
	ExpiresAt       *time.Time        `json:"expires_at"`
	Enveloped       bool              `json:"enveloped"`
	Size            int               `json:"size"`
	Truncated       bool              `json:"truncated,omitempty"`
	SHA256          string            `json:"sha256,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	MetadataDropped bool              `json:"metadata_dropped,omitempty"`
	Body            *string           `json:"body,omitempty"`
	BodyBase64      *string           `json:"body_base64,omitempty"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func timeOf(p *time.Time) time.Time {
	if p == nil {
		return time.Time{}
	}
	return *p
}

// MarshalJSON writes the message as the admin API serves it. A message
// whose Body is nil (a listing) has neither "body" nor "body_base64".
func (m Message) MarshalJSON() ([]byte, error) {
	j := messageJSON{
		PoisonID: m.PoisonID, PoisonedAt: timePtr(m.PoisonedAt), ID: m.ID, Queue: m.Queue,
		DequeueCount: m.DequeueCount, Rule: m.Rule, Reason: m.Reason,
		FailedAt: timePtr(m.FailedAt), InsertedAt: timePtr(m.InsertedAt), ExpiresAt: timePtr(m.ExpiresAt),
		Enveloped: m.Enveloped, Size: m.Size, Truncated: m.Truncated, SHA256: m.SHA256,
		Metadata: m.Metadata, MetadataDropped: m.MetadataDropped,
	}
	if m.Body != nil {
		if utf8.Valid(m.Body) {
			s := string(m.Body)
			j.Body = &s
		} else {
			s := base64.StdEncoding.EncodeToString(m.Body)
			j.BodyBase64 = &s
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (m *Message) UnmarshalJSON(b []byte) error {
	var j messageJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*m = Message{
		PoisonID: j.PoisonID, PoisonedAt: timeOf(j.PoisonedAt), ID: j.ID, Queue: j.Queue,
		DequeueCount: j.DequeueCount, Rule: j.Rule, Reason: j.Reason,
		FailedAt: timeOf(j.FailedAt), InsertedAt: timeOf(j.InsertedAt), ExpiresAt: timeOf(j.ExpiresAt),
		Enveloped: j.Enveloped, Size: j.Size, Truncated: j.Truncated, SHA256: j.SHA256,
		Metadata: j.Metadata, MetadataDropped: j.MetadataDropped,
	}
	switch {
	case j.Body != nil:
		m.Body = []byte(*j.Body)
	case j.BodyBase64 != nil:
		body, err := base64.StdEncoding.DecodeString(*j.BodyBase64)
		if err != nil {
			return errors.New("poison message: body_base64: " + err.Error())
		}
		m.Body = body
	}
	return nil
}
