package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
)

// poisonTarget names a queue's poison queue: --config and --queue (the
// queue, or its poison queue by name), or --url of the queue.
type poisonTarget struct {
	target
	json bool
}

// poisonQueues is a poison queue opened for a command, and the queues its
// messages go back to.
type poisonQueues struct {
	pq *queue.Queue
	// home is the name of the queue whose poison queue pq is ("" if no
	// configured queue poisons into it): a bare message, whose envelope
	// does not name its queue, goes back there.
	home   string
	cfg    *configured
	source string
	opened map[string]*queue.Queue
}

func newPoisonCmd(e env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "poison",
		Short: "List, show, requeue and purge a queue's poison messages",
		Long: `Work on the poison queue of a queue (--queue NAME names the queue or its
poison queue; --url URL names the queue, whose poison queue is NAME` + adaptq.PoisonSuffix + `).

A poison message keeps the original's id, queue, dequeue count, last failure
and its time in a small envelope around the original body; messages poisoned
by older versions show as bare bodies with unknown metadata.

  adaptq poison list    -q orders [--limit N] [--after CURSOR]
  adaptq poison show    -q orders ID
  adaptq poison requeue -q orders (ID... | --all)
  adaptq poison purge   -q orders (ID... | --all)

An ID is the poison message's id or the original's. requeue puts the
original body back to its queue first and deletes the poison message after,
so a crash in between leaves a duplicate, never a loss. list and show read
more than 32 messages by hiding them for a minute and handing them back at
once (see the README). Every subcommand takes --json.`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			return usageError{errors.New("no subcommand given (list, show, requeue, purge)")}
		},
	}
	cmd.AddCommand(newPoisonListCmd(e), newPoisonShowCmd(e), newPoisonChangeCmd(e, "requeue"), newPoisonChangeCmd(e, "purge"))
	return cmd
}

func (o *poisonTarget) addFlags(cmd *cobra.Command) {
	o.target.addFlags(cmd, true)
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON, as the admin API serves it")
}

// open opens the poison queue the flags name.
func (o *poisonTarget) open(ctx context.Context, cmd *cobra.Command) (*poisonQueues, error) {
	q, c, err := o.openConfigured(ctx, cmd)
	if err != nil {
		return nil, err
	}
	p := &poisonQueues{cfg: c, source: o.config, opened: map[string]*queue.Queue{}}
	switch {
	case c != nil && c.qc == nil:
		// --queue named the poison queue itself.
		p.pq, p.home = q, homeOf(ctx, c.cfg, q.Name())
		return p, nil
	case c != nil:
		p.home = q.Name()
		p.pq, err = q.Sibling(ctx, poisonName(*c.qc, q.Name()))
	default:
		p.home = q.Name()
		p.pq, err = q.Sibling(ctx, q.Name()+adaptq.PoisonSuffix)
	}
	p.opened[q.Name()] = q
	if err != nil {
		_ = q.Close()
		return nil, failuref("open the poison queue of %s: %w", q.Name(), err)
	}
	return p, nil
}

// homeOf is the name of the first configured queue that poisons into the
// queue called pname, "" if none does.
func homeOf(ctx context.Context, cfg adaptq.Config, pname string) string {
	for _, qc := range cfg.Queues {
		name := qc.Name
		if name == "" {
			n, err := queueName(ctx, qc.URL)
			if err != nil {
				continue
			}
			name = n
		}
		if poisonName(qc, name) == pname {
			return name
		}
	}
	return ""
}

// dest opens the queue a message poisoned from name goes back to.
func (p *poisonQueues) dest(ctx context.Context) poison.Dest {
	return func(name string) (*queue.Queue, error) {
		if name == "" {
			name = p.home
		}
		if name == "" {
			return nil, errors.New("the message has no envelope, so its queue is unknown; requeue it with --queue naming the queue it belongs to")
		}
		if q, ok := p.opened[name]; ok {
			return q, nil
		}
		if p.cfg == nil {
			return nil, fmt.Errorf("it was poisoned from queue %q, not the --url queue %s", name, p.home)
		}
		q, i, err := findQueue(ctx, p.cfg.cfg, p.source, name, false)
		if err != nil {
			return nil, fmt.Errorf("it was poisoned from queue %q: %w", name, err)
		}
		if i < 0 {
			_ = q.Close()
			return nil, fmt.Errorf("it was poisoned from %q, which the config names only as a poison queue", name)
		}
		pn := poisonName(p.cfg.cfg.Queues[i], name)
		if pn != p.pq.Name() {
			// Anyone who can write to the poison queue can name any
			// queue in an envelope: only a queue that poisons here can be
			// where the message came from.
			_ = q.Close()
			return nil, fmt.Errorf("its envelope names queue %q, whose poison queue is %s, not %s: refused", name, pn, p.pq.Name())
		}
		// Two backends may each have a poison queue of that name: the
		// queue's own poison queue must be this very one.
		if same, err := samePoison(ctx, q, pn, p.pq); err != nil || !same {
			_ = q.Close()
			if err != nil {
				return nil, fmt.Errorf("its envelope names queue %q, whose poison queue %s could not be opened to compare: %w", name, pn, err)
			}
			return nil, fmt.Errorf("its envelope names queue %q, whose poison queue %s is on another backend than this one: refused", name, pn)
		}
		p.opened[name] = q
		return q, nil
	}
}

// samePoison reports whether q's poison queue, named pn, is pq itself
// and not a queue of the same name on another backend.
func samePoison(ctx context.Context, q *queue.Queue, pn string, pq *queue.Queue) (bool, error) {
	sib, err := q.Sibling(ctx, pn)
	if err != nil {
		return false, err
	}
	defer func() { _ = sib.Close() }()
	return sib.SameQueue(pq), nil
}

// close closes every queue p opened, turning a failure into err if it has
// none yet.
func (p *poisonQueues) close(err *error) {
	closeQueue(p.pq, err)
	for _, q := range p.opened {
		closeQueue(q, err)
	}
}

type poisonListCmd struct {
	poisonTarget
	limit int
	after string
	scan  bool
}

func newPoisonListCmd(e env) *cobra.Command {
	o := &poisonListCmd{}
	cmd := &cobra.Command{
		Use:   "list [--queue NAME | --url URL] [--limit N] [--after CURSOR] [--scan] [--json]",
		Short: "List poison messages, oldest first, a page at a time",
		Long: `List the poison messages of a queue, oldest first: poison id, original id,
dequeue count, when it failed, why. A page holds --limit messages; the last
line gives the command for the next page (--after CURSOR). With --json the
page is one JSON object, as GET /v1/queues/{name}/poison serves it.

A listing only peeks, with backend calls bounded by the page (see
poison.List): SQLite, PostgreSQL and memory page through every message;
Azure and Redis show the first 32 and say the listing is incomplete; SQS
cannot peek. --scan reads every message (up to 10,000) with gets on any
backend, hiding each for the scan and raising its dequeue count in the
poison queue, for every page: use it where a peek cannot show them.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd, e) },
	}
	o.addFlags(cmd)
	cmd.Flags().IntVarP(&o.limit, "limit", "n", poison.DefaultLimit, fmt.Sprintf("list at most `N` messages (1..%d)", poison.MaxLimit))
	cmd.Flags().StringVar(&o.after, "after", "", "start after `CURSOR`, as the previous page's last line gave it")
	cmd.Flags().BoolVar(&o.scan, "scan", false, "read every message with gets (any backend; hides them during the scan and raises their dequeue counts)")
	return cmd
}

func (o *poisonListCmd) run(cmd *cobra.Command, e env) (err error) {
	if o.limit < 1 || o.limit > poison.MaxLimit {
		return usageErrorf("--limit %d: must be 1..%d", o.limit, poison.MaxLimit)
	}
	ctx := cmd.Context()
	p, err := o.open(ctx, cmd)
	if err != nil {
		return err
	}
	defer p.close(&err)
	list := poison.List
	if o.scan {
		list = poison.ListScan
	}
	page, err := list(ctx, p.pq, o.after, o.limit)
	if errors.Is(err, poison.ErrBadCursor) {
		return inputErrorf("--after: %w", err)
	}
	if err != nil {
		return failuref("list %s: %w", p.pq.Name(), err)
	}
	if o.json {
		return writeJSONTo(e.stdout, admin.PoisonPage{Queue: p.home, PoisonQueue: p.pq.Name(), Page: page})
	}
	if len(page.Messages) == 0 {
		fmt.Fprintf(e.stdout, "%s: no poison messages\n", p.pq.Name())
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POISON ID\tID\tDEQUEUED\tFAILED AT\tSIZE\tREASON")
	for _, m := range page.Messages {
		id, failed, reason := m.ID, "-", reasonSummary(string(m.Rule), m.Reason, reasonWidth)
		if !m.Enveloped {
			id, reason = "-", "(bare body: from an older version or another program)"
		} else {
			failed = m.FailedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d B\t%s\n", m.PoisonID, id, m.DequeueCount, failed, m.Size, reason)
	}
	if err := tw.Flush(); err != nil {
		return failuref("write: %w", err)
	}
	scan := ""
	if o.scan {
		scan = " --scan"
	}
	switch {
	case page.Truncated && o.scan:
		fmt.Fprintf(e.stdout, "(the listing may be incomplete: one scan reads at most %d messages, within %s)\n", poison.MaxScan, poison.ScanVisibility)
	case page.Truncated:
		fmt.Fprintf(e.stdout, "(the listing may be incomplete: %s shows only the first %d messages to a peek; --scan reads them all)\n", p.pq.Features().Name, p.pq.Features().MaxPeek)
	}
	if page.Next != "" {
		fmt.Fprintf(e.stdout, "more: %s%s --after %s\n", cmd.CommandPath(), scan, page.Next)
	}
	return nil
}

// oneLine is s on one line, cut to n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

type poisonShowCmd struct{ poisonTarget }

func newPoisonShowCmd(e env) *cobra.Command {
	o := &poisonShowCmd{}
	cmd := &cobra.Command{
		Use:   "show [--queue NAME | --url URL] ID [--json]",
		Short: "Show one poison message: its metadata and body",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("show takes one ID (the poison id or the original id), got %d", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, e, args[0]) },
	}
	o.addFlags(cmd)
	return cmd
}

func (o *poisonShowCmd) run(cmd *cobra.Command, e env, id string) (err error) {
	ctx := cmd.Context()
	p, err := o.open(ctx, cmd)
	if err != nil {
		return err
	}
	defer p.close(&err)
	m, err := poison.FindScan(ctx, p.pq, id)
	if errors.Is(err, poison.ErrNotFound) {
		return inputError{err}
	}
	if err != nil {
		return failuref("show %s in %s: %w", id, p.pq.Name(), err)
	}
	if o.json {
		return writeJSONTo(e.stdout, m)
	}
	w := e.stdout
	fmt.Fprintf(w, "poison id      %s (poisoned %s)\n", m.PoisonID, stamp(m.PoisonedAt))
	if !m.Enveloped {
		fmt.Fprintln(w, "metadata       unknown: a bare body, poisoned by an older version or written by another program")
	} else {
		fmt.Fprintf(w, "id             %s\n", m.ID)
		fmt.Fprintf(w, "queue          %s\n", m.Queue)
		fmt.Fprintf(w, "dequeue count  %d\n", m.DequeueCount)
		fmt.Fprintf(w, "rule           %s\n", m.Rule)
		fmt.Fprintf(w, "reason         %s\n", m.Reason)
		fmt.Fprintf(w, "failed at      %s\n", stamp(m.FailedAt))
		fmt.Fprintf(w, "inserted at    %s\n", stamp(m.InsertedAt))
		expires := "never"
		if !m.ExpiresAt.IsZero() {
			expires = stamp(m.ExpiresAt)
		}
		fmt.Fprintf(w, "expires        %s\n", expires)
	}
	fmt.Fprintf(w, "size           %d B\n", m.Size)
	if m.Truncated {
		fmt.Fprintf(w, "truncated      only the first %d B were kept (sha256 of the whole body %s); it cannot be requeued\n", len(m.Body), m.SHA256)
	}
	printBody(w, m.Body)
	return nil
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

type poisonChangeCmd struct {
	poisonTarget
	all bool
}

// newPoisonChangeCmd is requeue or purge: they differ only in what they do
// to each message.
func newPoisonChangeCmd(e env, verb string) *cobra.Command {
	o := &poisonChangeCmd{}
	short, long := "Put poison messages back to their queues", `Put the selected poison messages back to the queues they were poisoned from
(a bare message to the --queue queue), then delete them from the poison
queue: a crash in between leaves a duplicate, never a loss. The message gets
a new id there and starts again at dequeue count 0. A second poison copy of
a message already put back is deleted without a second put.`
	if verb == "purge" {
		short, long = "Delete poison messages", "Delete the selected poison messages."
	}
	cmd := &cobra.Command{
		Use:   verb + " [--queue NAME | --url URL] (ID... | --all) [--json]",
		Short: short,
		Long:  long + "\n\nAn ID is the poison id or the original id. Exit code 1 if any message failed,\n2 if an ID was not found.",
		RunE:  func(cmd *cobra.Command, args []string) error { return o.run(cmd, e, verb, args) },
	}
	o.addFlags(cmd)
	cmd.Flags().BoolVar(&o.all, "all", false, "act on every poison message")
	return cmd
}

func (o *poisonChangeCmd) run(cmd *cobra.Command, e env, verb string, ids []string) (err error) {
	switch {
	case o.all && len(ids) > 0:
		return usageErrorf("give IDs or --all, not both")
	case !o.all && len(ids) == 0:
		return usageErrorf("%s needs IDs or --all", verb)
	}
	ctx := cmd.Context()
	p, err := o.open(ctx, cmd)
	if err != nil {
		return err
	}
	defer p.close(&err)
	sel := poison.Selection{All: o.all, IDs: ids}
	var res poison.Result
	if verb == "requeue" {
		res, err = poison.Requeue(ctx, p.pq, p.dest(ctx), sel)
	} else {
		res, err = poison.Purge(ctx, p.pq, sel)
	}
	if err != nil {
		return failuref("%s %s: %w", verb, p.pq.Name(), err)
	}
	if o.json {
		if err := writeJSONTo(e.stdout, res); err != nil {
			return err
		}
	} else {
		printResult(e.stdout, verb, p.pq.Name(), res)
	}
	switch {
	case len(res.Failed) > 0:
		return exitWith{exitFailure}
	case len(res.NotFound) > 0:
		return exitWith{exitUsage}
	}
	return nil
}

func printResult(w io.Writer, verb, pname string, res poison.Result) {
	past := map[string]string{"requeue": "requeued", "purge": "purged"}[verb]
	for _, d := range res.Done {
		switch {
		case d.Duplicate:
			fmt.Fprintf(w, "%s: a second copy of %s, deleted\n", d.PoisonID, d.ID)
		case d.NewID != "":
			fmt.Fprintf(w, "%s: %s to %s as %s\n", d.PoisonID, past, d.Queue, d.NewID)
		default:
			fmt.Fprintf(w, "%s: %s\n", d.PoisonID, past)
		}
	}
	for _, f := range res.Failed {
		fmt.Fprintf(w, "%s: failed: %s\n", f.PoisonID, f.Error)
	}
	for _, id := range res.NotFound {
		fmt.Fprintf(w, "%s: not found in %s\n", id, pname)
	}
	fmt.Fprintf(w, "%s %s from %s", past, messages(len(res.Done)), pname)
	if n := len(res.Failed); n > 0 {
		fmt.Fprintf(w, ", %d failed", n)
	}
	if n := len(res.NotFound); n > 0 {
		fmt.Fprintf(w, ", %d not found", n)
	}
	fmt.Fprintln(w)
	if res.More {
		fmt.Fprintf(w, "more remain: run it again\n")
	}
}

// writeJSONTo writes v as indented JSON.
func writeJSONTo(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return failuref("write: %w", err)
	}
	return nil
}

// reasonSummary is a failure's reason for the REASON column, in at most n
// characters. An exec handler's reason is `handler: exec "CMD": exit
// status 65; stderr: "…"` (handler.ExitError): the command is the
// configured handler's, and the column was cut before the stderr, the part
// that says what went wrong. It shows the rule, the exit status, and as
// many of the last lines of the stderr tail as fit ("poison show" has the
// whole reason).
func reasonSummary(rule, reason string, n int) string {
	head, quoted, hasStderr := strings.Cut(reason, stderrMark)
	if rest, ok := strings.CutPrefix(head, `handler: exec "`); ok {
		if _, status, ok := strings.Cut(rest, `": `); ok {
			head = status
		}
	}
	s := oneLine(rule+": "+head, n)
	if !hasStderr {
		return s
	}
	text, cut := unquoteTail(quoted)
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return s
	}
	if cut {
		lines[len(lines)-1] += "…"
	}
	// The last lines that fit, in their order; at least the last one.
	room := n - utf8.RuneCountInString(s) - len(": ")
	keep := len(lines) - 1
	used := utf8.RuneCountInString(lines[keep])
	for keep > 0 {
		w := utf8.RuneCountInString(lines[keep-1]) + len(" / ")
		if keep-1 > 0 {
			w += len("… / ") // what marks the lines left out
		}
		if used+w > room {
			break
		}
		keep--
		used += utf8.RuneCountInString(lines[keep]) + len(" / ")
	}
	out := strings.Join(lines[keep:], " / ")
	if keep > 0 {
		out = "… / " + out
	}
	return oneLine(s+": "+out, n)
}

// stderrMark starts the stderr tail in an exec handler's error text.
const stderrMark = "; stderr: "

// unquoteTail reads the Go-quoted stderr tail of a reason. A reason cut
// short (poison.MaxReason; its "…" mark) loses its closing
// quote, maybe within an escape: what decodes is kept, and cut is true.
func unquoteTail(q string) (text string, cut bool) {
	q = strings.TrimSpace(q)
	if s, err := strconv.Unquote(q); err == nil {
		return s, false
	}
	q = strings.TrimSuffix(q, "…")
	for i := 0; i < 12 && len(q) > 1; i++ {
		if s, err := strconv.Unquote(q + `"`); err == nil {
			return s, true
		}
		q = q[:len(q)-1]
	}
	return strings.Trim(q, `"`), true
}

// reasonWidth is the most characters of the REASON column.
const reasonWidth = 80
