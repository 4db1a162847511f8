package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/internal/durationhint"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/tracing/otlpenv"
)

const (
	// producers is how many batch puts enqueue keeps in flight: enough
	// for the SQLite driver's commits to overlap its batches' writing, and
	// for a network backend's round trips to overlap.
	producers = 8
	// progressMin is the smallest run that shows a progress line on a
	// terminal; a smaller one finishes before a line would help.
	progressMin = 1000
	// progressEvery is how often the progress line is redrawn (10 per
	// second: smooth to the eye, cheap for the terminal).
	progressEvery = 100 * time.Millisecond
)

type enqueueCmd struct {
	target
	ttl   durationFlag
	delay durationFlag
	count int
	file  string
	lines bool
}

func newEnqueueCmd(e env) *cobra.Command {
	o := &enqueueCmd{target: target{create: true}, ttl: durationFlag{allowNever: true, positive: true}}
	cmd := &cobra.Command{
		Use:   "enqueue [--queue NAME | --url URL] [flags] (BODY | --file FILE | -)",
		Short: "Put a message on a queue, once or many times",
		Long: `Put a message on a queue: the BODY argument, the contents of --file FILE, or
standard input with "-". With --count N the message is put N times; with --lines
each line of the input is a message of its own (empty lines are skipped), which
is a simple way for a producer in any language to hand work to adaptq.

Messages go in batches (one backend call per batch where the backend takes
many at once: SQS's SendMessageBatch of 10, one transaction or statement of
32 on SQLite, PostgreSQL and Redis), 8 batches at a time, so messages of one
run are not stored in input order (queues never promise order anyway). Everything is checked before the first
put: a bad flag or an oversized body writes nothing. Ctrl-C stops the sending
of new batches: those in flight end and enqueue says what was written (exit 1);
a second Ctrl-C cancels those too (their messages may or may not be stored).

Tracing: with OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER=otlp) set,
as for run, each batch is a producer span sent to that OTLP/HTTP endpoint, and
its messages carry its trace context.`,
		Example: `  adaptq enqueue --queue orders 'order 1001'
  adaptq enqueue --queue orders --count 10000 'load test'
  seq 1 100 | adaptq enqueue --queue orders --lines -
  # configs/adaptq.yaml's queue, from the repository root: a path given here is
  # relative to the working directory, one in a config file to the file's directory
  adaptq enqueue --url 'sqlite://./configs/data/adaptq.db?queue=orders' --delay 1m --ttl 1h --file order.json`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, e, args) },
	}
	o.addFlags(cmd, true)
	f := cmd.Flags()
	f.Var(&o.ttl, "ttl", "time-to-live of each message: a Go `duration` (\"1h\", \"30m\") or \"never\" (default 168h, the queue's 7 days)")
	f.Var(&o.delay, "delay", "keep each message hidden for this `duration` after the put (at most 168h; default 0, visible at once)")
	f.IntVarP(&o.count, "count", "n", 1, "put the message (or each line) `N` times")
	f.StringVarP(&o.file, "file", "f", "", "read the body from `FILE` (\"-\" is standard input)")
	f.BoolVar(&o.lines, "lines", false, "put each line of the input as its own message")
	return cmd
}

func (o *enqueueCmd) run(cmd *cobra.Command, e env, args []string) (err error) {
	ctx := cmd.Context()
	if o.count < 1 {
		return usageErrorf("--count %d: must be at least 1", o.count)
	}
	if err := o.checkTimes(); err != nil {
		return err
	}
	input, source, err := o.readInput(cmd, e, args)
	if err != nil {
		return err
	}
	bodies := [][]byte{input}
	if o.lines {
		bodies = splitLines(input)
		if len(bodies) == 0 {
			return inputErrorf("--lines: %s has no non-empty line", source)
		}
	}

	// As run: spans (one per PutBatch) to the OTLP endpoint the OTEL_*
	// variables name, if any, flushed before enqueue returns.
	_, stopTracing, err := otlpenv.Setup(ctx)
	if err != nil {
		return inputError{fmt.Errorf("tracing: %w", err)}
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), tracingFlush)
		defer cancel()
		if err := stopTracing(fctx); err != nil {
			fmt.Fprintf(e.stderr, "adaptq: tracing: flushing spans at exit failed: %v\n", err)
		}
	}()

	q, from, err := o.openConfigured(ctx, cmd)
	if err != nil {
		return err
	}
	defer closeQueue(q, &err)
	if from == nil {
		from = o.workerFor(ctx)
	}

	opts := queue.PutOptions{TTL: o.ttl.d, InitialVisibilityDelay: o.delay.d}
	limit := q.MaxBodySize()
	for i, b := range bodies {
		if len(b) > limit {
			what := source
			if o.lines {
				what = fmt.Sprintf("line %d of %s", lineNumber(input, i), source)
			}
			return inputErrorf("%s: %d bytes is over the limit of queue %s, %d bytes per message", what, len(b), q.Name(), limit)
		}
	}
	if _, err := queue.CheckPut(bodies[0], opts, limit); err != nil {
		return inputErrorf("--ttl %s, --delay %s: %w", o.ttl.d, o.delay.d, err)
	}

	total := len(bodies) * o.count
	start := time.Now()
	var done atomic.Int64
	stopProgress := func() {}
	if e.terminal && total >= progressMin {
		stopProgress = showProgress(e.stdout, q.Name(), total, &done, start)
	}
	// A first signal (Ctrl-C) stops the sending of new batches, those in
	// flight end as they would, and the report says what was written; a
	// second cancels those in flight too.
	sigs, stopSignals := e.subscribe()
	defer stopSignals()
	pctx, cancelPuts := context.WithCancel(ctx)
	var halt atomic.Bool
	select {
	case <-sigs: // came while the input was read or the queue opened
		halt.Store(true)
	default:
	}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if !halt.Load() && !waitSignal(pctx, sigs) {
			return
		}
		halt.Store(true)
		if waitSignal(pctx, sigs) {
			cancelPuts()
			stopSignals() // a third kills the process
		}
	}()
	defer func() {
		cancelPuts()
		<-watched
	}()
	out, err := putAll(pctx, q, bodies, total, opts, &done, &halt)
	stopProgress()
	elapsed := time.Since(start)
	if err != nil {
		return failuref("put to %s: %s: %w", q.Name(), out.describe(), err)
	}
	firstID := out.firstID
	noun := "messages"
	if total == 1 {
		noun = "message"
	}
	fmt.Fprintf(e.stdout, "put %d %s to %s in %s (%s/s)", total, noun, q.Name(), roundDuration(elapsed), rate(total, elapsed))
	if total == 1 {
		fmt.Fprintf(e.stdout, ": id %s", firstID)
	}
	if o.delay.d == 0 {
		fmt.Fprint(e.stdout, trigger(ctx, from, q))
	}
	fmt.Fprintln(e.stdout)
	return nil
}

// trigger pulls the push trigger of a configured queue that has one, on
// the worker's admin endpoint, and says what happened, or why nothing
// did and when the worker will find the messages. A trigger is a hint:
// if it is lost, the worker finds the messages at its next poll, within
// the queue's trigger.safety_interval.
func trigger(ctx context.Context, from *configured, q *queue.Queue) string {
	if from == nil {
		return "; no worker triggered (no config names this queue: a worker finds the messages at its next poll; enqueue --config FILE pulls a configured trigger)"
	}
	if from.qc == nil {
		return "" // a poison queue: no worker listens to it
	}
	qc, ac := from.qc, from.cfg.Admin
	safety := qc.TriggerSafetyInterval(q.Features())
	switch {
	case !qc.Trigger.Enabled:
		return fmt.Sprintf("; no trigger configured (trigger.enabled is false): the worker finds the messages at its next poll, within idle.max (%s)", qc.Idle.Max)
	case ac.Address == "" && q.Features().NativeNotify:
		return "; the queue's backend wakes the worker itself (native notify)"
	case ac.Address == "":
		return fmt.Sprintf("; worker not triggered: admin.address is empty, so no other process can signal it (it finds the messages within trigger.safety_interval, %s)", safety)
	}
	if err := admin.SendTrigger(ctx, admin.DialAddress(ac.Address), ac.Token, q.Name()); err != nil {
		return fmt.Sprintf("; worker at %s not triggered (it finds the messages within trigger.safety_interval, %s)", ac.Address, safety)
	}
	return "; worker triggered"
}

// workerFor finds, for a queue named by --url, the worker config that
// lists the same queue: the default config ($ADAPTQ_CONFIG or
// configs/adaptq.yaml), if it exists and is valid. Nil if none does.
func (o *enqueueCmd) workerFor(context.Context) *configured {
	path := defaultConfig()
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	cfg, err := adaptq.LoadConfig(path)
	if err != nil {
		return nil
	}
	for i := range cfg.Queues {
		if sameQueue(cfg.Queues[i].URL, o.url) {
			return &configured{cfg: cfg, qc: &cfg.Queues[i], index: i}
		}
	}
	return nil
}

// checkTimes checks --ttl and --delay against each other and the queue
// limits, naming the flags.
func (o *enqueueCmd) checkTimes() error {
	ttl := o.ttl.d
	if ttl == 0 {
		ttl = queue.DefaultTTL
	}
	d := o.delay.d
	if d > queue.MaxVisibilityTimeout {
		return inputErrorf("--delay %s: is above the longest delay, %s", d, queue.MaxVisibilityTimeout)
	}
	if ttl != queue.NoExpiry && d > 0 && d >= ttl {
		return inputErrorf("--delay %s: is not shorter than the message's time-to-live %s (--ttl)", d, ttl)
	}
	return nil
}

// readInput reads the one body source the arguments give and names it.
func (o *enqueueCmd) readInput(cmd *cobra.Command, e env, args []string) ([]byte, string, error) {
	fileSet := cmd.Flags().Changed("file")
	switch {
	case len(args) == 1 && fileSet:
		return nil, "", usageErrorf("two bodies: the argument %q and --file %q; give exactly one of BODY, --file FILE or -", shorten(args[0]), o.file)
	case len(args) == 0 && !fileSet:
		return nil, "", usageErrorf("no body: give BODY, --file FILE, or - to read standard input")
	case fileSet && o.file == "":
		return nil, "", usageErrorf("--file: no file name given")
	}
	path := o.file
	if len(args) == 1 {
		if args[0] != "-" {
			return []byte(args[0]), "the BODY argument", nil
		}
		path = "-"
	}
	if path == "-" {
		b, err := io.ReadAll(e.stdin)
		if err != nil {
			return nil, "", failuref("read standard input: %w", err)
		}
		return b, "standard input", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", inputErrorf("--file: %w", err)
	}
	return b, "--file " + path, nil
}

// errInterrupted ends a run a signal stopped.
var errInterrupted = errors.New("interrupted")

// waitSignal waits for a signal on sigs (false: ctx ended first).
func waitSignal(ctx context.Context, sigs <-chan os.Signal) bool {
	select {
	case <-sigs:
		return true
	case <-ctx.Done():
		return false
	}
}

// putOutcome is what putAll did: the messages the backend acknowledged,
// each batch that had failures, and how many were never sent.
type putOutcome struct {
	firstID string // the first message's id, if it was written
	total   int
	written int
	failed  []batchFailure // in the order of their first message
	unsent  int            // not sent: a batch failed first, ctx ended or a signal came
	halted  bool           // a signal stopped the sending
}

// batchFailure is a batch whose messages first..last (0-based, in the
// order of the input) were sent, failed of them not acknowledged: err is
// the first one's error.
type batchFailure struct {
	first, last, failed int
	// unknown of the failed may have been written: their error is
	// transient or the run's context ended (a reply lost after the
	// write), as README's batch put says.
	unknown int
	err     error
}

// what says how many of the batch's messages were not written, or may
// have been.
func (f batchFailure) what() string {
	switch f.unknown {
	case 0:
		return fmt.Sprintf("%d not written", f.failed)
	case f.failed:
		return fmt.Sprintf("%d unacknowledged, which may have been written", f.failed)
	}
	return fmt.Sprintf("%d not written and %d unacknowledged, which may have been written", f.failed-f.unknown, f.unknown)
}

// mayHaveWritten: a put that failed with err may have been stored.
func mayHaveWritten(err error) bool {
	return queue.IsTransient(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// err is the first failed batch's error, naming its messages; nil if
// none failed and everything was sent.
func (o putOutcome) err() error {
	if len(o.failed) > 0 {
		f := o.failed[0]
		return fmt.Errorf("messages %d to %d: %s: %w", f.first, f.last, f.what(), f.err)
	}
	return nil
}

// describe says what was and was not written, batch by batch.
func (o putOutcome) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d written", o.written, o.total)
	for _, f := range o.failed {
		fmt.Fprintf(&b, "; messages %d to %d: %s (%v)", f.first, f.last, f.what(), f.err)
	}
	if o.unsent > 0 && (o.halted || len(o.failed) == 0) {
		fmt.Fprintf(&b, "; %d not sent", o.unsent)
	} else if o.unsent > 0 {
		fmt.Fprintf(&b, "; %d not sent after the failure", o.unsent)
	}
	return b.String()
}

// putAll puts total messages, body i%len(bodies) for the i-th, in
// batches of Features().MaxBatch (PutBatch: one backend call each where
// the driver puts in batches), with up to producers batches in flight;
// done counts the stored ones, for the progress line. A batch that fails
// stops the sending of new batches, but the batches already in flight
// run to their end with ctx (never cancelled because a sibling failed: a
// cancelled call may have written and then fail, and the count would
// miss what it wrote), so the outcome counts every message the backend
// acknowledged. The error is the first failed batch's (putOutcome.err),
// or ctx's if it ended.
//
// halt, when set (a signal), stops the sending of new batches as a failed
// batch does; the error is then errInterrupted unless a batch failed.
func putAll(ctx context.Context, q *queue.Queue, bodies [][]byte, total int, opts queue.PutOptions, done *atomic.Int64, halt *atomic.Bool) (putOutcome, error) {
	chunk := q.Features().MaxBatch
	var next atomic.Int64
	var stop atomic.Bool
	var mu sync.Mutex
	out := putOutcome{total: total}
	var wg sync.WaitGroup
	for range min(producers, (total+chunk-1)/chunk) {
		wg.Go(func() {
			msgs := make([]queue.PutMessage, 0, chunk)
			for !stop.Load() && !halt.Load() && ctx.Err() == nil {
				start := int(next.Add(int64(chunk))) - chunk
				if start >= total {
					return
				}
				end := min(start+chunk, total)
				msgs = msgs[:0]
				for i := start; i < end; i++ {
					msgs = append(msgs, queue.PutMessage{Body: bodies[i%len(bodies)], Opts: opts})
				}
				res, err := q.PutBatch(ctx, msgs)
				f := batchFailure{first: start, last: end - 1, err: err}
				written := 0
				if err != nil { // refused as a whole: nothing written
					f.failed = end - start
				}
				for _, r := range res {
					if r.Err == nil {
						written++
					} else {
						if f.failed++; f.err == nil {
							f.err = r.Err
						}
						if mayHaveWritten(r.Err) {
							f.unknown++
						}
					}
				}
				done.Add(int64(written))
				mu.Lock()
				out.written += written
				if start == 0 && len(res) > 0 && res[0].Err == nil {
					out.firstID = res[0].ID
				}
				if f.failed > 0 {
					out.failed = append(out.failed, f)
					stop.Store(true)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	sort.Slice(out.failed, func(i, j int) bool { return out.failed[i].first < out.failed[j].first })
	out.unsent = total - out.written - failedCount(out.failed)
	if err := out.err(); err != nil {
		return out, err
	}
	if out.unsent > 0 && halt.Load() {
		out.halted = true
		return out, errInterrupted
	}
	if out.unsent > 0 {
		return out, ctx.Err()
	}
	return out, nil
}

func failedCount(fs []batchFailure) int {
	n := 0
	for _, f := range fs {
		n += f.failed
	}
	return n
}

// showProgress redraws one line on w until the returned func is called,
// which erases it.
func showProgress(w io.Writer, name string, total int, done *atomic.Int64, start time.Time) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-quit:
				fmt.Fprint(w, "\r\033[K")
				return
			case <-t.C:
				n := int(done.Load())
				fmt.Fprintf(w, "\r\033[Kputting to %s: %d/%d (%d%%), %s/s", name, n, total, n*100/total, rate(n, time.Since(start)))
			}
		}
	}()
	return func() {
		close(quit)
		wg.Wait()
	}
}

// splitLines returns the non-empty lines of b, without their line ends.
func splitLines(b []byte) [][]byte {
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		l = bytes.TrimSuffix(l, []byte("\r"))
		if len(l) > 0 {
			out = append(out, l)
		}
	}
	return out
}

// lineNumber is the 1-based line number of the i-th non-empty line of b.
func lineNumber(b []byte, i int) int {
	for n, l := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSuffix(l, []byte("\r"))) == 0 {
			continue
		}
		if i == 0 {
			return n + 1
		}
		i--
	}
	return 0
}

func rate(n int, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", float64(n)/d.Seconds())
}

func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

func shorten(s string) string {
	const max = 40
	if r := []rune(s); len(r) > max {
		return string(r[:max]) + "…"
	}
	return s
}

// durationFlag is a flag holding a Go duration; with allowNever, "never"
// means queue.NoExpiry.
type durationFlag struct {
	d          time.Duration
	allowNever bool
	// positive refuses 0, which would mean the default (--ttl 0s gave
	// 7 days).
	positive bool
}

// String is "" when unset, so that help shows no default of its own (the
// usage text says what unset means).
func (f *durationFlag) String() string {
	switch {
	case f.d == 0:
		return ""
	case f.d == queue.NoExpiry && f.allowNever:
		return "never"
	}
	return f.d.String()
}

func (f *durationFlag) Set(s string) error {
	if f.allowNever && s == "never" {
		f.d = queue.NoExpiry
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration: " + durationhint.Explain(s))
	}
	if d < 0 {
		return errors.New("is negative")
	}
	if d == 0 && f.positive {
		if f.allowNever {
			return errors.New(`is zero: give a positive duration, "never" for no expiry, or leave the flag out for the default`)
		}
		return errors.New("is zero: give a positive duration, or leave the flag out for the default")
	}
	f.d = d
	return nil
}

func (f *durationFlag) Type() string { return "duration" }

// maxArgs allows at most n positional arguments, as a usage error.
func maxArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > n {
			return usageErrorf("%s takes at most %d argument(s), got %d (quote a body with spaces)", cmd.CommandPath(), n, len(args))
		}
		return nil
	}
}
