package sim

import (
	"context"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/scaling"
)

// DefaultSweepTargets are the latency targets a sweep compares when none
// are given: from latency-first (the free backends' 10 ms default) to
// cost-first (the billed backends' 200 ms) and beyond.
var DefaultSweepTargets = []time.Duration{
	2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond, time.Second,
}

// DefaultSweepRate and DefaultSweepLength are a sweep's steady arrival
// rate and simulated time when none are given: the middle rate,
// over long enough for a p99 of 120,000 pickups.
const (
	DefaultSweepRate   = 200.0
	DefaultSweepLength = 10 * time.Minute
)

// DefaultSweepWarmUp is the start of a sweep's run whose messages its
// p50 and p99 leave out: the pool starts at one task, and at 2,000 msgs/s
// its first second's backlog, and the shrink after it, took up to half a
// minute to clear; counted, they were the p99 of a ten-minute run (155 ms
// at a 5 ms target, with 10 ms after them; issue 27). A sweep reports the
// steady state its rate settles in.
const DefaultSweepWarmUp = time.Minute

// SweepWarmUp is the warm-up of a sweep of length: DefaultSweepWarmUp, or
// half of a shorter run.
func SweepWarmUp(length time.Duration) time.Duration {
	return min(DefaultSweepWarmUp, length/2)
}

// SweepPoint is one latency target's outcome, with the trigger and without.
type SweepPoint struct {
	Target  time.Duration
	Trigger SweepResult
	Poll    SweepResult
}

// SweepResult is what one policy cost at the sweep's rate.
type SweepResult struct {
	// CallsPerMessage counts every call, the producer's put included.
	CallsPerMessage float64
	// MonthlyCost is the calls of a month at this rate, puts included.
	MonthlyCost float64
	P50, P99    time.Duration
	Processed   int64
}

// Sweep is the trade a latency target makes at one steady arrival rate.
type Sweep struct {
	Rate        float64
	Length      time.Duration
	Messages    int64
	Service     time.Duration
	PricePer10k float64
	BatchDelete bool
	Points      []SweepPoint
}

// RunSweep simulates a steady rate (messages a second) for length with
// adaptq's listener at each latency target, with the trigger and without,
// and reports calls per message, cost per month and pickup latency.
func RunSweep(ctx context.Context, rate float64, length time.Duration, targets []time.Duration, o Options) (Sweep, error) {
	if rate <= 0 {
		return Sweep{}, fmt.Errorf("sim: rate: %v is not positive", rate)
	}
	if len(targets) == 0 {
		targets = DefaultSweepTargets
	}
	w := Workload{Name: fmt.Sprintf("steady %g msgs/s", rate), Phases: []Phase{{Duration: length, Rate: rate}}, Days: 1, Jitter: true}
	var policies []Policy
	for _, t := range targets {
		if t <= 0 {
			return Sweep{}, fmt.Errorf("sim: latency target %s is not positive", t)
		}
		policies = append(policies,
			Adaptq("trigger-"+t.String(), scaling.DefaultSLATarget, t, true),
			Adaptq("poll-"+t.String(), scaling.DefaultSLATarget, t, false))
	}
	o.WarmUp = SweepWarmUp(length)
	rep, err := Run(ctx, w, policies, o)
	if err != nil {
		return Sweep{}, err
	}
	o = o.withDefaults()
	sw := Sweep{Rate: rate, Length: length, Messages: rep.Messages, Service: rep.Service, PricePer10k: rep.PricePer10k, BatchDelete: rep.BatchDelete}
	month := float64(meter.HoursPerMonth) * float64(time.Hour) / float64(length)
	res := func(r Result) SweepResult {
		calls := r.Calls + r.Puts
		s := SweepResult{
			MonthlyCost: meter.CostOf(int64(math.Round(float64(calls)*month)), rep.PricePer10k),
			P50:         r.P50, P99: r.P99, Processed: r.Processed,
		}
		if r.Processed > 0 {
			s.CallsPerMessage = float64(calls) / float64(r.Processed)
		}
		return s
	}
	for i, t := range targets {
		sw.Points = append(sw.Points, SweepPoint{Target: t, Trigger: res(rep.Results[2*i]), Poll: res(rep.Results[2*i+1])})
	}
	return sw, nil
}

// WriteTable prints the sweep: a row per latency target, with the trigger
// and without.
func (s Sweep) WriteTable(w io.Writer) error {
	var b strings.Builder
	deletes := "one call per message deleted (Azure)"
	if s.BatchDelete {
		deletes = "one call per batch deleted (SQLite, PostgreSQL, Redis, memory)"
	}
	fmt.Fprintf(&b, "latency targets at a steady %g msgs/s for %s (%s messages); service %s per message; deletes: %s; $%g per 10,000 calls\n",
		s.Rate, fmtDuration(s.Length), group(s.Messages), s.Service, deletes, s.PricePer10k)
	fmt.Fprintf(&b, "calls/msg counts every call (the put too); $/month is a month of them at this rate; p50/p99 is put → handler start,\nin the steady state: messages put in the first %s, while the pool grows from one task, are left out\n\n", fmtDuration(SweepWarmUp(s.Length)))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "latency target\tcadence\ttrigger: calls/msg\t$/month\tp50\tp99\tpolling: calls/msg\t$/month\tp50\tp99\t")
	for _, p := range s.Points {
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.2f\t%s\t%s\t%.3f\t%.2f\t%s\t%s\t\n", p.Target, p.Target/2,
			p.Trigger.CallsPerMessage, p.Trigger.MonthlyCost, fmtLatency(p.Trigger.P50), fmtLatency(p.Trigger.P99),
			p.Poll.CallsPerMessage, p.Poll.MonthlyCost, fmtLatency(p.Poll.P50), fmtLatency(p.Poll.P99))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteString("\nThe simulator's calls take no time, so the latencies are the cadence's alone; a real backend adds its call time. Arrivals are\nevenly spaced, each at a random moment of its slot.\n")
	b.WriteString(sweepBoundNote + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// sweepBoundNote says what a sweep's latencies mean, under its table and
// its plot: a latency target bounds the pickup, it does not set it.
const sweepBoundNote = `The latency target bounds the pickup where the cadence is what a task waits for. A task also waits while more than
new_batch_threshold of its messages run: with a target well below the handlers' service time, gets of a few messages each
keep that many running, and p99 can pass the target (a tighter target then buys calls, not pickup). Within the bound, the
pickup depends on how the pool's gets spread over the cadence: each task gets once per cadence, and tasks started together
stay in step (the model's calls take no time). A pool that grew in more steps spreads its gets over more moments, so a
looser target, which needs more tasks at a high rate, can show a lower p50 and p99 than a tighter one. Read a row's
latency as "within", not "at".`

// series is one line of a chart.
type series struct {
	name   string
	color  string
	dashed bool
	ys     []float64
}

// WriteSVG draws the sweep as an SVG image: calls per message (left) and
// p50/p99 pickup latency (right) against the latency target, with the
// trigger and without.
func (s Sweep) WriteSVG(w io.Writer) error {
	xs := make([]float64, len(s.Points))
	labels := make([]string, len(s.Points))
	pick := func(f func(SweepPoint) float64) []float64 {
		ys := make([]float64, len(s.Points))
		for i, p := range s.Points {
			ys[i] = f(p)
		}
		return ys
	}
	for i, p := range s.Points {
		xs[i] = float64(p.Target)
		labels[i] = p.Target.String()
	}
	msf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	const width, height = 1000, 640
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" text-anchor="middle">%s</text>`+"\n", width/2,
		html.EscapeString(fmt.Sprintf("adaptq simulate: the latency target's trade at a steady %g msgs/s (%s)", s.Rate, map[bool]string{true: "batch deletes", false: "a delete per message"}[s.BatchDelete])))
	chart(&b, 60, 50, 400, 340, "calls per message (the put included)", "", xs, labels, []series{
		{"with the trigger", "#1f77b4", false, pick(func(p SweepPoint) float64 { return p.Trigger.CallsPerMessage })},
		{"without (polling)", "#ff7f0e", false, pick(func(p SweepPoint) float64 { return p.Poll.CallsPerMessage })},
	})
	chart(&b, 560, 50, 400, 340, "pickup latency, put → handler start (ms)", "", xs, labels, []series{
		{"p99, with the trigger", "#1f77b4", false, pick(func(p SweepPoint) float64 { return msf(p.Trigger.P99) })},
		{"p50, with the trigger", "#1f77b4", true, pick(func(p SweepPoint) float64 { return msf(p.Trigger.P50) })},
		{"p99, without", "#ff7f0e", false, pick(func(p SweepPoint) float64 { return msf(p.Poll.P99) })},
		{"p50, without", "#ff7f0e", true, pick(func(p SweepPoint) float64 { return msf(p.Poll.P50) })},
		{"the latency target: a bound, not the latency", "#999", true, pick(func(p SweepPoint) float64 { return msf(p.Target) })},
	})
	note := fmt.Sprintf("p50/p99 leave out the messages put in the first %s, while the pool grows from one task. ", fmtDuration(SweepWarmUp(s.Length))) +
		strings.ReplaceAll(sweepBoundNote, "\n", " ")
	for i, line := range wrapWords(note, 150) {
		fmt.Fprintf(&b, `<text x="20" y="%d" font-size="11">%s</text>`+"\n", 550+15*i, html.EscapeString(line))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// chart draws one panel at (x0, y0) of size w×h: a log-scaled x axis
// labelled at each point, a linear y axis from 0, a line per series and a
// legend.
func chart(b *strings.Builder, x0, y0, w, h float64, title, _ string, xs []float64, labels []string, ss []series) {
	lo, hi := math.Log10(xs[0]), math.Log10(xs[len(xs)-1])
	if hi <= lo {
		lo, hi = lo-1, hi+1
	}
	ymax := 0.0
	for _, s := range ss {
		for _, y := range s.ys {
			ymax = math.Max(ymax, y)
		}
	}
	ymax = niceCeil(ymax)
	px := func(x float64) float64 { return x0 + (math.Log10(x)-lo)/(hi-lo)*w }
	py := func(y float64) float64 { return y0 + h - y/ymax*h }
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="13">%s</text>`+"\n", x0+w/2, y0-8, html.EscapeString(title))
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`+"\n", x0, y0, w, h)
	for i := 0; i <= 5; i++ {
		y := ymax * float64(i) / 5
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x0, py(y), x0+w, py(y))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-4, py(y)+4, trimFloat(y))
	}
	for i, x := range xs {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", px(x), y0, px(x), y0+h)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(x), y0+h+16, html.EscapeString(labels[i]))
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">latency target (log scale)</text>`+"\n", x0+w/2, y0+h+34)
	for k, s := range ss {
		var pts []string
		for i, x := range xs {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(x), py(s.ys[i])))
		}
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="6,4"`
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"><title>%s</title></polyline>`+"\n",
			s.color, dash, strings.Join(pts, " "), html.EscapeString(s.name))
		for i, x := range xs {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s</title></circle>`+"\n",
				px(x), py(s.ys[i]), s.color, html.EscapeString(fmt.Sprintf("%s at %s: %s", s.name, labels[i], trimFloat(s.ys[i]))))
		}
		ly := y0 + h + 58 + float64(k)*16
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", x0, ly-4, x0+24, ly-4, s.color, dash)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x0+30, ly, html.EscapeString(s.name))
	}
}

// wrapWords breaks text into lines of at most width characters, at spaces.
func wrapWords(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// niceCeil rounds a chart's maximum up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}
