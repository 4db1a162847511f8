package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what a run found, policy by policy.
type Report struct {
	// Workload names the workload; Days is how many days it covers, Length
	// its simulated time and Messages the messages it puts.
	Workload string
	Days     int
	Length   time.Duration
	Messages int64
	// The options the run used.
	Service     time.Duration
	PricePer10k float64
	Seed        int64
	BatchDelete bool
	Concurrency int
	// Results has one entry per policy, in the order they were given.
	Results []Result
}

// Result is one policy's outcome.
type Result struct {
	Policy string
	About  string
	// Calls is the consumer's billed calls: gets (empty or not), deletes
	// and the agent's depth reads. The producer's puts are the same for
	// every policy and counted apart, in Puts.
	Calls int64
	// IdleCalls are gets that found the queue empty: pure waste.
	IdleCalls int64
	// ByKind splits Calls by the meter's kinds (get, get_empty, delete,
	// delete_batch, count).
	ByKind map[string]int64
	// MonthlyCost is one day's Calls × 30 at the run's price, in dollars.
	MonthlyCost float64
	Puts        int64
	// Processed messages were handled and deleted; Left were still in the
	// queue when the workload ended.
	Processed, Left int64
	// P50, P99 and MaxLatency are the pickup latency, from a message's put
	// to its handler's start, over every message handled (P50 and P99 but
	// those put in Options.WarmUp).
	P50, P99, MaxLatency time.Duration
	// MaxBacklog is the most messages in the queue at once, waiting or
	// being handled (what Count reports).
	MaxBacklog int64
	// MaxInFlight is the most handlers running at once.
	MaxInFlight int
	// PeakTasks is the largest pool, EndTasks the pool at the end, Resizes
	// how many times the agent changed it.
	PeakTasks, EndTasks, Resizes int
	// WorkEdges counts idle→busy edges (WorkDetected), Triggers the
	// producer's notifications.
	WorkEdges, Triggers int64
	// Events is how many simulation events the run took.
	Events int64
	// With Options.Downstream: Refused counts the calls it refused,
	// Poisoned the messages moved to the poison queue, and P99Done is the
	// 99th percentile from a message's put to the end of the run that
	// succeeded. With an adaptive policy, MeanLimit is its concurrency
	// limit averaged over time and EndLimit the limit at the end.
	Refused, Poisoned int64
	P99Done           time.Duration
	MeanLimit         float64
	EndLimit          int
}

// Result returns the result of the policy called name.
func (r Report) Result(name string) (Result, bool) {
	for _, x := range r.Results {
		if x.Policy == name {
			return x, true
		}
	}
	return Result{}, false
}

// jsonResult is Result with durations in seconds.
type jsonResult struct {
	Policy      string           `json:"policy"`
	About       string           `json:"about"`
	Calls       int64            `json:"calls"`
	IdleCalls   int64            `json:"idle_calls"`
	ByKind      map[string]int64 `json:"calls_by_kind"`
	MonthlyCost float64          `json:"monthly_cost_usd"`
	Puts        int64            `json:"puts"`
	Processed   int64            `json:"processed"`
	Left        int64            `json:"left"`
	P50         float64          `json:"p50_latency_s"`
	P99         float64          `json:"p99_latency_s"`
	MaxLatency  float64          `json:"max_latency_s"`
	MaxBacklog  int64            `json:"max_backlog"`
	MaxInFlight int              `json:"max_in_flight"`
	PeakTasks   int              `json:"peak_tasks"`
	EndTasks    int              `json:"end_tasks"`
	Resizes     int              `json:"resizes"`
	WorkEdges   int64            `json:"work_detected"`
	Triggers    int64            `json:"triggers"`
}

type jsonReport struct {
	Workload    string       `json:"workload"`
	Days        int          `json:"days"`
	Length      string       `json:"length"`
	Messages    int64        `json:"messages"`
	Service     string       `json:"service"`
	PricePer10k float64      `json:"price_per_10k"`
	Seed        int64        `json:"seed"`
	BatchDelete bool         `json:"batch_delete"`
	Concurrency int          `json:"concurrency"`
	Results     []jsonResult `json:"results"`
}

// MarshalJSON writes the report with stable snake_case keys and durations
// in seconds.
func (r Report) MarshalJSON() ([]byte, error) {
	j := jsonReport{
		Workload: r.Workload, Days: r.Days, Length: fmtDuration(r.Length), Messages: r.Messages,
		Service: r.Service.String(), PricePer10k: r.PricePer10k, Seed: r.Seed,
		BatchDelete: r.BatchDelete, Concurrency: r.Concurrency,
		Results: make([]jsonResult, len(r.Results)),
	}
	for i, x := range r.Results {
		j.Results[i] = jsonResult{
			Policy: x.Policy, About: x.About, Calls: x.Calls, IdleCalls: x.IdleCalls, ByKind: x.ByKind,
			MonthlyCost: math.Round(x.MonthlyCost*100) / 100, Puts: x.Puts, Processed: x.Processed, Left: x.Left,
			P50: x.P50.Seconds(), P99: x.P99.Seconds(), MaxLatency: x.MaxLatency.Seconds(),
			MaxBacklog: x.MaxBacklog, MaxInFlight: x.MaxInFlight, PeakTasks: x.PeakTasks, EndTasks: x.EndTasks, Resizes: x.Resizes,
			WorkEdges: x.WorkEdges, Triggers: x.Triggers,
		}
	}
	return json.Marshal(j)
}

// WriteTable prints the report as an aligned table, a header naming the
// workload and options, and a line per policy saying what it is.
func (r Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	deletes := "one call per message deleted (Azure)"
	if r.BatchDelete {
		deletes = "one call per batch deleted"
	}
	conc := "no bound"
	if r.Concurrency > 0 {
		conc = fmt.Sprintf("%d", r.Concurrency)
	}
	fmt.Fprintf(&b, "workload: %s: %s over %d day(s), %s messages\n", r.Workload, fmtDuration(r.Length), r.Days, group(r.Messages))
	fmt.Fprintf(&b, "service %s per message; handler concurrency: %s; deletes: %s; $%g per 10,000 calls; seed %d\n\n",
		r.Service, conc, deletes, r.PricePer10k, r.Seed)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	width := len("policy")
	for _, x := range r.Results {
		width = max(width, len(x.Policy))
	}
	fmt.Fprintf(tw, "%-*s\t", width, "policy")
	fmt.Fprintln(tw, "calls/day\tidle/day\tgets/day\tdeletes/day\tcounts/day\t$/month\tp50\tp99\tmax backlog\tpeak tasks\tend tasks\tleft\t")
	for _, x := range r.Results {
		perDay := func(n int64) string { return group(int64(math.Round(float64(n) / float64(max(r.Days, 1))))) }
		fmt.Fprintf(tw, "%-*s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t\n",
			width, x.Policy, perDay(x.Calls), perDay(x.IdleCalls),
			perDay(x.ByKind["get"]+x.ByKind["get_empty"]), perDay(x.ByKind["delete"]+x.ByKind["delete_batch"]), perDay(x.ByKind["count"]),
			fmt.Sprintf("%.2f", x.MonthlyCost), fmtLatency(x.P50), fmtLatency(x.P99),
			group(x.MaxBacklog), x.PeakTasks, x.EndTasks, group(x.Left))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteString("\n")
	for _, x := range r.Results {
		fmt.Fprintf(&b, "  %-14s %s\n", x.Policy, x.About)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// fmtLatency prints a latency to three significant figures.
func fmtLatency(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%.3gµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.3gms", float64(d)/float64(time.Millisecond))
	case d < time.Minute:
		return fmt.Sprintf("%.3gs", d.Seconds())
	default:
		return d.Round(time.Second).String()
	}
}

// group writes n with thousands separators: 79,200.
func group(n int64) string {
	s := fmt.Sprintf("%d", n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
