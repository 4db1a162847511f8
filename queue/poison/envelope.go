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
package poison

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/adaptq/adaptq/queue"
)

// Magic starts every enveloped poison message: the format's name and
// version, then a space and the JSON header.
const Magic = "adaptq-poison/1 "

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

	// Enveloped is false for a poison message without the envelope
	// (written before it existed, or by another program): its body is the
	// whole poison message and every field above but PoisonID, PoisonedAt,
	// Body and Size is unknown.
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
}

// ErrTooLarge: the original body and the envelope's header together exceed
// the poison queue's body limit even with no reason. The listener then
// puts the bare body, as before the envelope existed, and logs why.
var ErrTooLarge = fmt.Errorf("poison envelope: %w", queue.ErrTooLarge)

// Encode wraps m's body and metadata in the envelope. The reason is
// cleaned (invalid UTF-8 and control characters become U+FFFD, so the
// header is text every backend carries) and cut to MaxReason bytes, and cut
// further if the envelope would exceed maxBody bytes (0: no limit). If even
// an empty reason does not fit, Encode returns ErrTooLarge.
func Encode(m Message, maxBody int) ([]byte, error) {
	h := header{
		ID: m.ID, Queue: m.Queue, DequeueCount: m.DequeueCount, Rule: m.Rule,
		Reason:   cutReason(cleanReason(m.Reason), MaxReason),
		FailedAt: m.FailedAt.UTC(), InsertedAt: m.InsertedAt.UTC(), Size: len(m.Body),
	}
	if !m.ExpiresAt.IsZero() {
		t := m.ExpiresAt.UTC()
		h.ExpiresAt = &t
	}
	for {
		line, err := marshalHeader(h)
		if err != nil {
			return nil, err
		}
		n := len(Magic) + len(line) + len(m.Body) // line ends with its newline
		if maxBody <= 0 || n <= maxBody {
			out := make([]byte, 0, n)
			out = append(append(append(out, Magic...), line...), m.Body...)
			return out, nil
		}
		if h.Reason == "" {
			return nil, fmt.Errorf("%w: %d bytes of body and header, the limit is %d", ErrTooLarge, n, maxBody)
		}
		// Escaping may make the reason longer in JSON than in bytes: cut
		// the excess and measure again.
		h.Reason = cutReason(h.Reason, max(len(h.Reason)-(n-maxBody)-len(truncated), 0))
	}
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
// the original's metadata and body; any other body (written before the
// envelope, or by another program, or an envelope whose header does not
// parse or whose size does not match) is returned whole as a bare body with
// Enveloped false. Decode never fails: no poison message is unreadable.
func Decode(pm *queue.Message) Message {
	m := Message{PoisonID: pm.ID, PoisonedAt: pm.InsertedAt, Body: pm.Body, Size: len(pm.Body)}
	h, body, ok := parse(pm.Body)
	if !ok {
		return m
	}
	m.ID, m.Queue, m.DequeueCount, m.Rule, m.Reason = h.ID, h.Queue, h.DequeueCount, h.Rule, h.Reason
	m.FailedAt, m.InsertedAt = h.FailedAt, h.InsertedAt
	if h.ExpiresAt != nil {
		m.ExpiresAt = *h.ExpiresAt
	}
	m.Body, m.Size, m.Enveloped = body, len(body), true
	return m
}

// parse splits an envelope into its header and the original body.
func parse(b []byte) (header, []byte, bool) {
	var h header
	rest, ok := bytes.CutPrefix(b, []byte(Magic))
	if !ok {
		return h, nil, false
	}
	line, body, ok := bytes.Cut(rest, []byte{'\n'})
	if !ok {
		return h, nil, false
	}
	if err := json.Unmarshal(line, &h); err != nil || h.Size != len(body) || h.ID == "" {
		return h, nil, false
	}
	return h, body, true
}

// messageJSON is a Message as the admin API and "adaptq poison --json"
// write it: times in RFC 3339 (null when unknown), the body as text when
// it is valid UTF-8, else base64.
type messageJSON struct {
	PoisonID     string     `json:"poison_id"`
	PoisonedAt   *time.Time `json:"poisoned_at"`
	ID           string     `json:"id,omitempty"`
	Queue        string     `json:"queue,omitempty"`
	DequeueCount int        `json:"dequeue_count"`
	Rule         Rule       `json:"rule,omitempty"`
	Reason       string     `json:"reason,omitempty"`
	FailedAt     *time.Time `json:"failed_at"`
	InsertedAt   *time.Time `json:"inserted_at"`
	ExpiresAt    *time.Time `json:"expires_at"`
	Enveloped    bool       `json:"enveloped"`
	Size         int        `json:"size"`
	Body         *string    `json:"body,omitempty"`
	BodyBase64   *string    `json:"body_base64,omitempty"`
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
		Enveloped: m.Enveloped, Size: m.Size,
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
		Enveloped: j.Enveloped, Size: j.Size,
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
