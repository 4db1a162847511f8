package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/scaling"
)

// Exit codes of Main.
const (
	ExitOK    = 0
	ExitError = 1 // the workload could not be read or the run failed
	ExitUsage = 2 // a bad flag or flag value
)

const usage = `usage: adaptq simulate [flags]

Runs listener policies against the memory driver in virtual time and
reports, per policy, the billed calls, the idle calls (empty gets), the
cost per month, the pickup latency (p50, p99) and the largest backlog.
The default workload is the Best Practices article's scenario: an 8-hour workday in which
8 packages of 2,000–200,000 transactions arrive, each over 15 minutes
(busy 25% of the day), then 16 hours with no traffic.

Latency targets: with --rate, --latency-targets or --plot, it runs instead
adaptq's listener at a steady --rate (messages a second, default 200) for
--length (default 10m) at each latency target (--latency-targets, default
2ms,5ms,10ms,20ms,50ms,100ms,200ms,500ms,1s), with the push trigger and
without, and prints for each target its calls per message (the put
included), cost per month at that rate, and p50/p99 pickup latency (put →
handler start). A listener paces its gets at half its target, so a lower
target picks up sooner and makes more calls. --plot FILE also draws the
trade as an SVG image: calls per message (left) and p50/p99 pickup (right)
against the target, with the trigger (blue) and without (orange). Add
--batch-delete for a backend that deletes a batch in one call (SQLite,
PostgreSQL, Redis, memory); the default prices Azure's one delete per
message. For example:

  adaptq simulate --rate 2000 --batch-delete --plot trade.svg

flags:
`

// names is a repeatable, comma-separated --policy flag.
type names []string

func (n *names) String() string { return strings.Join(*n, ",") }

func (n *names) Type() string { return "list" }

func (n *names) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*n = append(*n, s)
		}
	}
	return nil
}

// Main is the command `adaptq simulate`: args are its arguments (after the
// subcommand's name); the report goes to stdout, errors to stderr; it
// returns the process's exit code. An interrupt stops the run.
//
//	adaptq simulate [--workload FILE] [--days N] [--service D] [--price P]
//	                [--seed S] [--policy NAME…] [--json]
//	                [--target D] [--burst-window D] [--batch-delete]
//	                [--concurrency N] [--print-workload]
//	adaptq simulate [--rate R] [--length D] [--latency-targets D,…]
//	                [--plot FILE.svg] [--batch-delete] [--json]
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return run(ctx, args, stdout, stderr)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// pflag, as cobra uses for every other command: --days, not -days.
	fs := pflag.NewFlagSet("adaptq simulate", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = true
	var (
		workload   = fs.String("workload", "", "a YAML file of arrival phases (default: the Best Practices article's scenario)")
		days       = fs.Int("days", 1, "simulated days (a workload file's day is repeated)")
		service    = fs.Duration("service", DefaultService, "handler service time per message")
		price      = fs.Float64("price", meter.DefaultPricePer10k, "dollars per 10,000 calls")
		seed       = fs.Int64("seed", DefaultSeed, "seed of the scenario and of the backoff jitter")
		asJSON     = fs.Bool("json", false, "print the report as JSON")
		target     = fs.Duration("target", scaling.DefaultSLATarget, "the SLA policy's pickup-latency target")
		window     = fs.Duration("burst-window", SeedBurstWindow, "seed scenario: how long a package takes to arrive (0: at once)")
		batchDel   = fs.Bool("batch-delete", false, "the backend deletes a batch in one call (default: one call per message, as Azure)")
		conc       = fs.Int("concurrency", 0, "handlers running at once across the pool (0: no bound)")
		printWork  = fs.Bool("print-workload", false, "print the workload as YAML and exit")
		rate       = fs.Float64("rate", 0, "latency targets: the steady arrival rate in messages a second (default 200 when a target or a plot is asked for)")
		length     = fs.Duration("length", DefaultSweepLength, "latency targets: simulated time at the steady rate")
		targetArgs names
		plot       = fs.String("plot", "", "latency targets: also write the trade as an SVG image to this file")
		policyArgs names
		scenario   = fs.String("scenario", "", "slowdown: fixed vs adaptive concurrency vs a rate limit against a downstream whose capacity halves and recovers (--service, --concurrency apply)")
	)
	fs.Var(&targetArgs, "latency-targets", "latency targets to compare, comma-separated durations (default "+sweepDefaults()+")")
	fs.Var(&policyArgs, "policy", "a policy to run, repeatable or comma-separated, or all (default: "+strings.Join(DefaultPolicies, ",")+")")
	fs.BoolP("help", "h", false, "show this help")
	printUsage := func(w io.Writer) {
		fmt.Fprint(w, usage)
		fmt.Fprint(w, fs.FlagUsages())
		fmt.Fprintln(w, "\npolicies:")
		for _, p := range Builtin(*target) {
			fmt.Fprintf(w, "  %-14s %s\n", p.Name, p.About)
		}
	}
	// Parse reports its error here, once; the usage is printed only when
	// asked for.
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			printUsage(stdout)
			return ExitOK
		}
		fmt.Fprintf(stderr, "adaptq simulate: %v\nRun 'adaptq simulate --help' for usage.\n", err)
		return ExitUsage
	}
	if help, _ := fs.GetBool("help"); help {
		printUsage(stdout)
		return ExitOK
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "adaptq simulate: "+format+"\n", a...)
		return ExitUsage
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q (flags only)", fs.Arg(0))
	case *days < 1:
		return bad("--days: %d is below 1", *days)
	case *service < 0:
		return bad("--service: %s is negative", *service)
	case *price <= 0:
		return bad("--price: %v is not positive", *price)
	case *target <= 0:
		return bad("--target: %s is not positive", *target)
	case *window < 0:
		return bad("--burst-window: %s is negative", *window)
	case *conc < 0:
		return bad("--concurrency: %d is negative", *conc)
	}
	switch *scenario {
	case "":
	case "slowdown":
		o := Options{Seed: *seed, Concurrency: *conc}
		if fs.Changed("service") {
			o.Service = *service
		}
		start := time.Now()
		sd, err := RunSlowdown(ctx, o, 0)
		if err == nil {
			if *asJSON {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				err = enc.Encode(sd)
			} else {
				err = sd.WriteTable(stdout)
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "adaptq simulate: %v\n", err)
			return ExitError
		}
		fmt.Fprintf(stderr, "simulated %s of 3 policies in %s\n", fmtDuration(sd.Report.Length), time.Since(start).Round(time.Millisecond))
		return ExitOK
	default:
		return bad("--scenario: %q is not slowdown (the only scenario)", *scenario)
	}
	if *rate != 0 || len(targetArgs) > 0 || *plot != "" {
		if *rate < 0 {
			return bad("--rate: %v is negative", *rate)
		}
		if *length <= 0 {
			return bad("--length: %s is not positive", *length)
		}
		if len(policyArgs) > 0 || *workload != "" {
			return bad("--policy and --workload do not go with --rate, --latency-targets or --plot (a steady rate, adaptq's listener at each target)")
		}
		var targets []time.Duration
		for _, a := range targetArgs {
			d, err := time.ParseDuration(a)
			if err != nil || d <= 0 {
				return bad("--latency-targets: %q is not a positive duration", a)
			}
			targets = append(targets, d)
		}
		r := *rate
		if r == 0 {
			r = DefaultSweepRate
		}
		return sweep(ctx, r, *length, targets, *plot, *asJSON, Options{
			Service: *service, PricePer10k: *price, Seed: *seed, BatchDelete: *batchDel, Concurrency: *conc,
		}, stdout, stderr)
	}
	if len(policyArgs) == 0 {
		policyArgs = DefaultPolicies
	}
	var policies []Policy
	if len(policyArgs) == 1 && policyArgs[0] == "all" {
		policies = Builtin(*target)
	} else {
		var err error
		if policies, err = Lookup(policyArgs, *target); err != nil {
			return bad("--policy: %v", strings.TrimPrefix(err.Error(), "sim: "))
		}
	}

	var w Workload
	if *workload != "" {
		var err error
		if w, err = LoadWorkload(*workload); err != nil {
			fmt.Fprintf(stderr, "adaptq simulate: %v\n", err)
			return ExitError
		}
		w = w.Repeat(*days)
	} else {
		w = SeedScenarioWindow(*seed, *days, *window)
	}
	if *printWork {
		if err := w.Format(stdout); err != nil {
			fmt.Fprintf(stderr, "adaptq simulate: %v\n", err)
			return ExitError
		}
		return ExitOK
	}

	start := time.Now()
	rep, err := Run(ctx, w, policies, Options{
		Service: *service, PricePer10k: *price, Seed: *seed,
		BatchDelete: *batchDel, Concurrency: *conc,
	})
	if err != nil {
		fmt.Fprintf(stderr, "adaptq simulate: %v\n", err)
		return ExitError
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = rep.WriteTable(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "adaptq simulate: %v\n", err)
		return ExitError
	}
	fmt.Fprintf(stderr, "simulated %s of %d policies in %s\n", fmtDuration(rep.Length), len(rep.Results), time.Since(start).Round(time.Millisecond))
	return ExitOK
}

func sweepDefaults() string {
	var ss []string
	for _, d := range DefaultSweepTargets {
		ss = append(ss, d.String())
	}
	return strings.Join(ss, ",")
}

// sweep runs and prints the latency-target comparison, and writes its plot.
func sweep(ctx context.Context, rate float64, length time.Duration, targets []time.Duration, plot string, asJSON bool, o Options, stdout, stderr io.Writer) int {
	start := time.Now()
	sw, err := RunSweep(ctx, rate, length, targets, o)
	if err != nil {
		fmt.Fprintf(stderr, "adaptq simulate: %v\n", err)
		return ExitError
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(sw)
	} else {
		err = sw.WriteTable(stdout)
	}
	if err == nil && plot != "" {
		err = writePlot(plot, sw)
		if err == nil {
			fmt.Fprintf(stderr, "wrote the plot to %s\n", plot)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "adaptq simulate: %v\n", err)
		return ExitError
	}
	fmt.Fprintf(stderr, "simulated %s at %d latency targets in %s\n", fmtDuration(length), len(sw.Points), time.Since(start).Round(time.Millisecond))
	return ExitOK
}

func writePlot(path string, sw Sweep) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := sw.WriteSVG(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
