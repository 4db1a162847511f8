package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/meter"
)

// adminTimeout bounds the wait for a worker's stats: a worker that does not
// answer in this time is reported as not running.
const adminTimeout = 2 * time.Second

type statsCmd struct {
	target
	json bool
}

func newStatsCmd(e env) *cobra.Command {
	o := &statsCmd{}
	cmd := &cobra.Command{
		Use:   "stats [--config FILE] [--queue NAME | --url URL] [--json]",
		Short: "Show queue depths and the running worker's counters and costs",
		Long: `Show the depth (approximate message count) of every configured queue and of
its poison queue, or of the one --queue or --url names. Then, if the worker is
running, read its admin endpoint (admin.address, with admin.token as a bearer
token) and show for each queue: dequeue tasks, messages processed, failed and
deleted, and over the last minute and the last hour (or the time the worker has
run, if shorter): messages, rate, pickup latency, backend calls by kind, calls
per message, empty gets (the cost of idling) and cost; then the cost since start
and a month at the current rate (from the last hour once the worker has run an
hour, from the last minute before; never from less than a minute).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd, e) },
	}
	o.addFlags(cmd, true)
	cmd.Flags().BoolVar(&o.json, "json", false, "print one JSON document")
	return cmd
}

// statsReport is what stats --json prints.
type statsReport struct {
	Config string       `json:"config,omitempty"`
	Queues []queueDepth `json:"queues"`
	// Worker is absent with --url, which names no worker.
	Worker *workerReport `json:"worker,omitempty"`
}

type queueDepth struct {
	Name  string `json:"name"`
	URL   string `json:"url,omitempty"` // redacted
	Depth int    `json:"depth"`
	Error string `json:"error,omitempty"`
	// Note says why there is no depth, when that is no error.
	Note string `json:"note,omitempty"`
	// Poison is the queue's poison queue, where messages that failed for
	// good are (absent if the driver cannot open it beside the queue).
	Poison *queueDepth `json:"poison,omitempty"`
}

type workerReport struct {
	Address string `json:"address"`
	Running bool   `json:"running"`
	// Note says why there are no stats.
	Note  string       `json:"note,omitempty"`
	Stats *admin.Stats `json:"stats,omitempty"`
}

func (o *statsCmd) run(cmd *cobra.Command, e env) error {
	ctx := cmd.Context()
	var r statsReport
	var failed []string
	if cmd.Flags().Changed("url") {
		q, err := o.open(ctx, cmd)
		if err != nil {
			return err
		}
		d := depth(ctx, q, o.url, q.Name()+adaptq.PoisonSuffix)
		r.Queues = append(r.Queues, d)
	} else {
		cfg, err := loadConfig(o.config, cmd.Flags().Changed("config"))
		if err != nil {
			return err
		}
		r.Config = o.config
		for i, qc := range cfg.Queues {
			d := queueDepth{Name: qc.Name, URL: queue.Redact(qc.URL)}
			if d.Name == "" {
				if n, ok := urlQueueName(qc.URL); ok {
					d.Name = n
				}
			}
			switch q, err := openURL(ctx, fmt.Sprintf("queues[%d].url", i), qc.URL, false); {
			case err != nil:
				d.Error = err.Error()
			case inProcess(q):
				// A new process's memory queue is a new, empty queue: its depth
				// is the worker's to tell (below, if it runs).
				_ = q.Close()
				d.Note = "in the worker's process only"
			default:
				d = depth(ctx, q, qc.URL, poisonName(qc, q.Name()))
			}
			if d.Name == "" {
				d.Name = d.URL
			}
			if o.queue != "" && d.Name != o.queue && (d.Poison == nil || d.Poison.Name != o.queue) {
				continue
			}
			r.Queues = append(r.Queues, d)
		}
		if o.queue != "" && len(r.Queues) == 0 {
			return inputErrorf("--queue %q: no such queue in %s (queues: %s)", o.queue, o.config, strings.Join(queueLabels(ctx, cfg), ", "))
		}
		r.Worker = fetchWorker(ctx, cfg.Admin)
		if r.Worker.Stats != nil && o.queue != "" {
			var keep []admin.QueueStats
			for _, qs := range r.Worker.Stats.Queues {
				if qs.Name == o.queue {
					keep = append(keep, qs)
				}
			}
			r.Worker.Stats.Queues = keep
		}
	}

	if o.json {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return failuref("write: %w", err)
		}
	} else {
		printStats(e.stdout, r)
	}
	for _, d := range r.Queues {
		for _, d := range []*queueDepth{&d, d.Poison} {
			if d != nil && d.Error != "" {
				failed = append(failed, d.Name)
			}
		}
	}
	if len(failed) > 0 {
		return failuref("could not read the depth of %s", strings.Join(failed, ", "))
	}
	return nil
}

// depth counts the messages of q and of its poison queue (one billed call
// each) and closes q.
func depth(ctx context.Context, q *queue.Queue, rawURL, poison string) queueDepth {
	defer q.Close()
	d := queueDepth{Name: q.Name(), URL: queue.Redact(rawURL)}
	n, err := q.Count(ctx)
	if err != nil {
		d.Error = err.Error()
	}
	d.Depth = n
	p, err := q.Sibling(ctx, poison)
	switch {
	case errors.Is(err, queue.ErrUnsupported):
		// The driver cannot open a queue beside this one: no poison row.
	case err != nil:
		d.Poison = &queueDepth{Name: poison, Error: err.Error()}
	default:
		pd := queueDepth{Name: poison}
		n, err := p.Count(ctx)
		if err != nil {
			pd.Error = err.Error()
		}
		pd.Depth = n
		_ = p.Close()
		d.Poison = &pd
	}
	return d
}

// fetchWorker reads the worker's stats from its admin endpoint.
func fetchWorker(ctx context.Context, ac adaptq.AdminConfig) *workerReport {
	w := &workerReport{Address: ac.Address}
	if ac.Address == "" {
		w.Note = "the worker's admin endpoint is disabled: admin.address is empty"
		return w
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin.DialAddress(ac.Address)+admin.StatsPath, nil)
	if err != nil {
		w.Note = fmt.Sprintf("admin.address %q: %v", ac.Address, err)
		return w
	}
	if ac.Token != "" {
		req.Header.Set("Authorization", "Bearer "+ac.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.Note = fmt.Sprintf("worker not running at %s", ac.Address)
		return w
	}
	defer resp.Body.Close()
	w.Running = true
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		w.Note = fmt.Sprintf("the worker at %s refused the request (HTTP 401): check admin.token", ac.Address)
		return w
	case resp.StatusCode != http.StatusOK:
		w.Note = fmt.Sprintf("the worker at %s answered %s", ac.Address, resp.Status)
		return w
	}
	var s admin.Stats
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&s); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			w.Running = false
			w.Note = fmt.Sprintf("worker not running at %s (no answer within %s)", ac.Address, adminTimeout)
			return w
		}
		w.Note = fmt.Sprintf("the worker at %s sent stats that do not decode: %v", ac.Address, err)
		return w
	}
	w.Stats = &s
	return w
}

func printStats(w io.Writer, r statsReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tDEPTH")
	for _, d := range r.Queues {
		for _, d := range []*queueDepth{&d, d.Poison} {
			switch {
			case d == nil:
			case d.Error != "":
				fmt.Fprintf(tw, "%s\t? (%s)\n", d.Name, d.Error)
			case d.Note != "":
				fmt.Fprintf(tw, "%s\t- (%s)\n", d.Name, d.Note)
			default:
				fmt.Fprintf(tw, "%s\t%d\n", d.Name, d.Depth)
			}
		}
	}
	_ = tw.Flush()
	wr := r.Worker
	if wr == nil {
		return
	}
	fmt.Fprintln(w)
	if wr.Stats == nil {
		fmt.Fprintf(w, "%s (only depth shown)\n", wr.Note)
		return
	}
	s := wr.Stats
	fmt.Fprintf(w, "worker at %s, up %s; calls priced at $%s per 10,000\n", wr.Address, time.Duration(s.Uptime).Round(time.Second), dollars(s.PricePer10k))
	for _, q := range s.Queues {
		fmt.Fprintf(w, "\n%s\n", q.Name)
		fmt.Fprintf(w, "  tasks      %d active, %d started in all\n", q.ActiveTasks, q.TotalTasks)
		fmt.Fprintf(w, "  messages   %d processed, %d failed, %d deleted\n", q.Processed, q.Failed, q.Deleted)
		fmt.Fprintf(w, "  calls      %s\n", callsByKind(q.Calls))
		perMessage := fmt.Sprintf("%.2f per message", q.CallsPerMessage)
		if q.CallsPerMessage == 0 {
			perMessage = "no message deleted yet"
		}
		fmt.Fprintf(w, "             %d in all, %s\n", q.TotalCalls, perMessage)
		printWindow(w, "last min", q.LastMinute)
		printWindow(w, "last hour", q.LastHour)
		fmt.Fprintf(w, "  cost       $%s since start; %s\n", dollars(q.Cost), monthly(q))
	}
}

// printWindow shows one window of a queue: what it covers, its messages,
// calls and cost.
func printWindow(w io.Writer, label string, win admin.Window) {
	span := time.Duration(win.Span)
	covers := "over " + span.String()
	if !win.Full {
		covers = fmt.Sprintf("over the %s run so far (less than %s)", time.Duration(win.Elapsed).Round(time.Second), span)
	}
	perMessage := "no message deleted"
	if win.CallsPerMessage > 0 {
		perMessage = fmt.Sprintf("%.2f per message", win.CallsPerMessage)
	}
	pickup := ""
	if win.PickedUp > 0 {
		pickup = fmt.Sprintf(", pickup latency %s", time.Duration(win.PickupLatency).Round(time.Millisecond))
	}
	fmt.Fprintf(w, "  %-9s  %s: %d processed (%.2f/s)%s\n", label, covers, win.Processed, win.Rate, pickup)
	fmt.Fprintf(w, "             %d calls (%s), %s, %d empty gets, $%s\n",
		win.TotalCalls, callsByKind(win.Calls), perMessage, win.EmptyGets, dollars(win.Cost))
}

// monthly says what the queue costs a month at the current rate, and from
// which window, or why that is not known yet.
func monthly(q admin.QueueStats) string {
	if q.MonthlyCost == nil {
		return fmt.Sprintf("a month at the current rate: not known before the worker has run %s", adaptq.MinExtrapolation)
	}
	from := "last minute"
	if q.LastHour.Full {
		from = "last hour"
	}
	idle := ""
	if q.IdleCallsPerHour != nil {
		idle = fmt.Sprintf(", %.0f empty gets an hour", *q.IdleCallsPerHour)
	}
	return fmt.Sprintf("$%s a month at the rate of the %s%s", dollars(*q.MonthlyCost), from, idle)
}

// callsByKind lists the kinds with calls, in the meter's order.
func callsByKind(calls map[string]int64) string {
	var parts []string
	seen := map[string]bool{}
	for _, k := range meter.Kinds() {
		name := k.String()
		seen[name] = true
		if n := calls[name]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", name, n))
		}
	}
	var other []string
	for name, n := range calls {
		if !seen[name] && n > 0 {
			other = append(other, fmt.Sprintf("%s %d", name, n))
		}
	}
	sort.Strings(other)
	parts = append(parts, other...)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// dollars shows an amount with cents, or to a millionth of a dollar when
// it is below a cent (a cost meter deals in fractions of a cent).
func dollars(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 0.01:
		return fmt.Sprintf("%.2f", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.6f", v), "0"), ".")
}
