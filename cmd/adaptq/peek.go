package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/adaptq/adaptq/queue"
)

// defaultPeek is how many messages peek shows unless -n says otherwise.
const defaultPeek = 10

type peekCmd struct {
	target
	n    int
	json bool
}

func newPeekCmd(e env) *cobra.Command {
	o := &peekCmd{}
	cmd := &cobra.Command{
		Use:   "peek [--queue NAME | --url URL] [-n N] [--json]",
		Short: "Show visible messages without taking them",
		Long: `Show up to N visible messages, oldest first, without hiding them or changing
their dequeue counts: id, dequeue count, inserted and expiry times, size and
body. A body that is printable UTF-8 is shown as text, any other as base64
after the marker "base64:". Messages a worker holds are invisible and not
shown. With --json each message is one JSON object per line, the body in
"body" (text) or "body_base64".`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd, e) },
	}
	o.addFlags(cmd, true)
	cmd.Flags().IntVarP(&o.n, "limit", "n", defaultPeek, fmt.Sprintf("show at most `N` messages (1..%d)", queue.MaxPeek))
	cmd.Flags().BoolVar(&o.json, "json", false, "print one JSON object per message")
	return cmd
}

// peekedMessage is a message as peek --json prints it.
type peekedMessage struct {
	ID           string     `json:"id"`
	DequeueCount int        `json:"dequeue_count"`
	InsertedAt   time.Time  `json:"inserted_at"`
	ExpiresAt    *time.Time `json:"expires_at"` // null: never
	Size         int        `json:"size"`
	Body         *string    `json:"body,omitempty"`
	BodyBase64   string     `json:"body_base64,omitempty"`
}

func (o *peekCmd) run(cmd *cobra.Command, e env) (err error) {
	if o.n < 1 || o.n > queue.MaxPeek {
		return usageErrorf("-n %d: must be 1..%d (the most one peek returns)", o.n, queue.MaxPeek)
	}
	q, err := o.open(cmd.Context(), cmd)
	if err != nil {
		return err
	}
	defer closeQueue(q, &err)
	msgs, err := q.Peek(cmd.Context(), o.n)
	if err != nil {
		return failuref("peek %s: %w", q.Name(), err)
	}
	if o.json {
		enc := json.NewEncoder(e.stdout)
		for _, m := range msgs {
			if err := enc.Encode(toPeeked(m)); err != nil {
				return failuref("write: %w", err)
			}
		}
		return nil
	}
	if len(msgs) == 0 {
		fmt.Fprintf(e.stdout, "%s: no visible messages\n", q.Name())
		return nil
	}
	for i, m := range msgs {
		if i > 0 {
			fmt.Fprintln(e.stdout)
		}
		printMessage(e.stdout, m)
	}
	return nil
}

func toPeeked(m *queue.Message) peekedMessage {
	p := peekedMessage{ID: m.ID, DequeueCount: m.DequeueCount, InsertedAt: m.InsertedAt.UTC(), Size: len(m.Body)}
	if !m.ExpiresAt.IsZero() {
		t := m.ExpiresAt.UTC()
		p.ExpiresAt = &t
	}
	if printable(m.Body) {
		s := string(m.Body)
		p.Body = &s
	} else {
		p.BodyBase64 = base64.StdEncoding.EncodeToString(m.Body)
	}
	return p
}

func printMessage(w io.Writer, m *queue.Message) {
	expires := "never"
	if !m.ExpiresAt.IsZero() {
		expires = m.ExpiresAt.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "id %s  dequeued %d  inserted %s  expires %s  size %d B\n",
		m.ID, m.DequeueCount, m.InsertedAt.UTC().Format(time.RFC3339), expires, len(m.Body))
	printBody(w, m.Body)
}

// printBody prints a body indented, as text if it is printable, else as
// base64 after the marker "base64:".
func printBody(w io.Writer, body []byte) {
	if !printable(body) {
		fmt.Fprintf(w, "  base64: %s\n", base64.StdEncoding.EncodeToString(body))
		return
	}
	if len(body) == 0 {
		fmt.Fprintln(w, "  (empty)")
		return
	}
	for _, line := range strings.Split(strings.TrimSuffix(string(body), "\n"), "\n") {
		fmt.Fprintf(w, "  %s\n", strings.TrimSuffix(line, "\r"))
	}
}

// printable reports whether b is valid UTF-8 made of printable characters,
// tabs and line ends (\n or \r\n): text a terminal shows as it is, with
// no control character that could rewrite what is on the screen.
func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	s := string(b)
	for i, r := range s {
		switch {
		case unicode.IsPrint(r), r == '\n', r == '\t':
		case r == '\r' && strings.HasPrefix(s[i+1:], "\n"):
		default:
			return false
		}
	}
	return true
}
