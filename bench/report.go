package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Row is one figure: what was run, what it measured, the target it is held
// to and whether it holds.
type Row struct {
	// What was run, in words a reader can rerun.
	What string
	// Figure is the measurement, with its unit.
	Figure string
	// Target is the bar the figure is held to, or "" for a figure reported
	// without one.
	Target string
	// Holds is Yes, No or "" (no target).
	Holds Verdict
	// Note explains the figure: the parameters, or, where a target is
	// missed, the measured reason.
	Note string
}

// Verdict says whether a row's target holds.
type Verdict string

// Verdicts.
const (
	Yes      Verdict = "yes"
	No       Verdict = "**no**"
	NoTarget Verdict = ""
)

// verdict is Yes if ok, else No.
func verdict(ok bool) Verdict {
	if ok {
		return Yes
	}
	return No
}

// Section is one table of the report.
type Section struct {
	// Key names the section on the command line (-only).
	Key string
	// Title is the heading, without its number.
	Title string
	// How says how the figures were measured: the setup, the sizes, the
	// choices a reader needs to judge them.
	How []string
	// Rows are the figures.
	Rows []Row
	// Notes follow the table: what the numbers say, and why.
	Notes []string
	// Err is set when the section could not be measured.
	Err error
	// Elapsed is how long the section took to run.
	Elapsed time.Duration
}

func (s *Section) add(r Row) { s.Rows = append(s.Rows, r) }

func (s *Section) how(format string, args ...any) {
	s.How = append(s.How, fmt.Sprintf(format, args...))
}

func (s *Section) note(format string, args ...any) {
	s.Notes = append(s.Notes, fmt.Sprintf(format, args...))
}

// SectionFunc measures one section. It fills s (its Key and Title are set)
// and returns an error if it could not measure; rows it added stay.
type SectionFunc func(ctx context.Context, e *Env, s *Section) error

// Spec registers a section.
type Spec struct {
	Key   string
	Title string
	Run   SectionFunc
}

// Sections are the report's sections, in order. A new one (a backend's
// benchmark) is one more entry.
var Sections = []Spec{
	{Key: "overhead", Title: "Listener overhead", Run: overhead},
	{Key: "embedded", Title: "Embedded: adaptq's SQLite driver vs goqite", Run: embedded},
	{Key: "azurite", Title: "Azurite", Run: azurite},
	{Key: "sqs", Title: "SQS (emulator)", Run: sqsSection},
	{Key: "calls", Title: "Calls per message at saturation", Run: callsPerMessage},
	{Key: "burst", Title: "Burst response", Run: burst},
	{Key: "work", Title: "Scaling with work", Run: scalingWithWork},
	{Key: "raw", Title: "Drivers raw", Run: raw},
	{Key: "steady", Title: "Pickup at steady rates", Run: steadyRatesSection},
	{Key: "trigger", Title: "Push trigger", Run: trigger},
	{Key: "postgres", Title: "PostgreSQL: adaptq's driver vs River", Run: postgresSection},
	{Key: "txput", Title: "PostgreSQL: enqueue in the application's transaction, adaptq PutTx vs River InsertTx", Run: txPutSection},
	{Key: "redis", Title: "Redis: adaptq's driver vs asynq", Run: redisSection},
	{Key: "sqlite", Title: "Embedded SQLite: backlogs, space, two processes", Run: sqliteSection},
	{Key: "putbatch", Title: "Batch put: PutBatch vs Put on every engine", Run: putBatchSection},
	{Key: "batchhandler", Title: "Batch handler: one bulk INSERT vs one INSERT per message", Run: batchHandlerSection},
}

// Env is what a section runs with.
type Env struct {
	Sizes Sizes
	// Dir is where a run makes its scratch directory for database files
	// (default the system's temporary directory); the scratch directory is
	// removed when the run ends.
	Dir string
	// Progress receives a line per step (nil: none).
	Progress io.Writer
	// Self is the command that runs this program again as a child (for
	// peak-memory measurements); RunChild must be wired into its main (or
	// TestMain).
	Self []string
}

func (e *Env) logf(format string, args ...any) {
	if e.Progress != nil {
		fmt.Fprintf(e.Progress, "bench: "+format+"\n", args...)
	}
}

// tempDir returns a fresh directory under e.Dir.
func (e *Env) tempDir(name string) (string, error) {
	return os.MkdirTemp(e.Dir, name+"-")
}

// Report is a whole run.
type Report struct {
	Machine  Machine
	Sizes    Sizes
	Sections []*Section
	Elapsed  time.Duration
	LoadEnd  string
}

// Run measures the sections whose keys are in only (all if only is empty)
// and returns the report. A section that fails is reported with its error;
// Run goes on with the next.
func Run(ctx context.Context, e *Env, only []string) (*Report, error) {
	// Database files go to a fresh directory under e.Dir (default the
	// system's temporary directory), removed when the run ends.
	base := e.Dir
	if base != "" {
		if err := os.MkdirAll(base, 0o755); err != nil {
			return nil, err
		}
	}
	runDir, err := os.MkdirTemp(base, "adaptq-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(runDir)
	if runDir, err = filepath.Abs(runDir); err != nil {
		return nil, err
	}
	e.Dir = runDir
	defer func() { e.Dir = base }()

	want := map[string]bool{}
	for _, k := range only {
		want[k] = true
	}
	for k := range want {
		found := false
		for _, sp := range Sections {
			found = found || sp.Key == k
		}
		if !found {
			return nil, fmt.Errorf("bench: no section %q", k)
		}
	}
	r := &Report{Machine: ReadMachine(), Sizes: e.Sizes}
	start := time.Now()
	for _, sp := range Sections {
		if len(want) > 0 && !want[sp.Key] {
			continue
		}
		if err := ctx.Err(); err != nil {
			return r, err
		}
		s := &Section{Key: sp.Key, Title: sp.Title}
		e.logf("section %s: start", sp.Key)
		t0 := time.Now()
		s.Err = sp.Run(ctx, e, s)
		s.Elapsed = time.Since(t0)
		if s.Err != nil {
			e.logf("section %s: error: %v", sp.Key, s.Err)
		}
		e.logf("section %s: done in %s", sp.Key, s.Elapsed.Round(time.Millisecond))
		r.Sections = append(r.Sections, s)
	}
	r.Elapsed = time.Since(start)
	r.LoadEnd = loadAverage()
	return r, nil
}

// Failed lists the sections that could not be measured.
func (r *Report) Failed() []*Section {
	var out []*Section
	for _, s := range r.Sections {
		if s.Err != nil {
			out = append(out, s)
		}
	}
	return out
}

// number is a section's number in the full list, stable when only some
// sections run.
func number(key string) int {
	for i, sp := range Sections {
		if sp.Key == key {
			return i + 1
		}
	}
	return 0
}

// Heading is the Markdown heading of a section.
func Heading(key, title string) string { return fmt.Sprintf("## %d. %s", number(key), title) }

// WriteMarkdown writes the report.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("# adaptq benchmarks\n\n")
	b.WriteString("Every figure below was measured in one run of the harness in `bench/`, on the machine described under it; ")
	b.WriteString("adaptq and the baseline or peer it is compared with ran back to back in the same process, so read the **ratios**, ")
	b.WriteString("and read absolute figures only against the machine. Regenerate with `make bench` ")
	b.WriteString("(`cd bench && go run ./cmd/benchreport -o ../BENCHMARKS.md`; `-h` lists the size flags). ")
	b.WriteString("A target that is missed is reported as missed, with the reason measured; on a loaded machine (see the load average) ")
	b.WriteString("timing targets can miss that hold on an idle one.\n\n")

	b.WriteString("## Machine\n\n")
	b.WriteString("| | |\n|---|---|\n")
	m := r.Machine
	fmt.Fprintf(&b, "| CPU | %s |\n", cell(m.CPU))
	fmt.Fprintf(&b, "| Cores | %d logical (GOMAXPROCS %d) |\n", m.Cores, m.GOMAXPROCS)
	if m.Memory != "" {
		fmt.Fprintf(&b, "| Memory | %s |\n", cell(m.Memory))
	}
	fmt.Fprintf(&b, "| Go | %s |\n", cell(m.Go))
	fmt.Fprintf(&b, "| OS | %s |\n", cell(m.OS))
	fmt.Fprintf(&b, "| Date | %s |\n", m.Date.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "| Load average (1, 5, 15 min) | %s at the start, %s at the end |\n", cell(m.Load), cell(r.LoadEnd))
	if m.Modules != "" {
		fmt.Fprintf(&b, "| Modules | %s |\n", cell(m.Modules))
	}
	fmt.Fprintf(&b, "| Sizes | %s |\n", cell(r.Sizes.String()))
	fmt.Fprintf(&b, "| Run time | %s |\n", r.Elapsed.Round(time.Second))
	b.WriteString("\n")

	// Summary: every row with a target.
	b.WriteString("## Summary\n\n")
	b.WriteString("Every figure that has a target, as measured below.\n\n")
	b.WriteString("| § | What was run | Figure | Target | Holds |\n|---|---|---|---|---|\n")
	for _, s := range r.Sections {
		for _, row := range s.Rows {
			if row.Target == "" {
				continue
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s |\n", number(s.Key), cell(row.What), cell(row.Figure), cell(row.Target), cell(string(row.Holds)))
		}
		if s.Err != nil {
			fmt.Fprintf(&b, "| %d | %s | error | | %s |\n", number(s.Key), cell(s.Title), No)
		}
	}
	b.WriteString("\n")

	for _, s := range r.Sections {
		b.WriteString(Heading(s.Key, s.Title))
		b.WriteString("\n\n")
		for _, h := range s.How {
			b.WriteString(h)
			b.WriteString("\n\n")
		}
		if len(s.Rows) > 0 || s.Err != nil {
			b.WriteString("| What was run | Figure | Target | Holds | Note |\n|---|---|---|---|---|\n")
			for _, row := range s.Rows {
				target, holds := row.Target, string(row.Holds)
				if target == "" {
					target, holds = "—", "—"
				}
				fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", cell(row.What), cell(row.Figure), cell(target), cell(holds), cell(row.Note))
			}
			if s.Err != nil {
				fmt.Fprintf(&b, "| error | %s | | %s | the section could not be measured |\n", cell(s.Err.Error()), No)
			}
			b.WriteString("\n")
		}
		for _, n := range s.Notes {
			b.WriteString("- ")
			b.WriteString(n)
			b.WriteString("\n")
		}
		if len(s.Notes) > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "<sub>Section run time: %s.</sub>\n\n", s.Elapsed.Round(100*time.Millisecond))
	}
	if t := strings.TrimSpace(ThroughputLatest); t != "" {
		b.WriteString(t)
		b.WriteString("\n\n<sub>Not rerun by `make bench`: embedded from `bench/throughput.md`, measured by hand with the commands it gives.</sub>\n\n")
	}
	if f := strings.TrimSpace(FlowControlLatest); f != "" {
		b.WriteString(f)
		b.WriteString("\n\n<sub>Not rerun by `make bench`: embedded from `bench/flowcontrol.md`, the simulator's output with the command it gives.</sub>\n\n")
	}
	if e := strings.TrimSpace(EmbeddingLatest); e != "" {
		b.WriteString(e)
		b.WriteString("\n\n<sub>Not rerun by `make bench`: embedded from `bench/embedding.md`, measured by hand with the commands it gives.</sub>\n\n")
	}
	if soak := SoakSection(SoakLatest); soak != "" {
		b.WriteString(soak)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// cell makes s safe inside a Markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}
