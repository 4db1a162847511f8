package bench

import (
	_ "embed"
	"fmt"
	"io"
	"math"
	"os/exec"
	"runtime/debug"
	"strings"
	"time"
)

// soakSeries is one series of the soak, how to read it from a sample and
// how to show it.
type soakSeries struct {
	Name, Unit string
	Scale      float64 // divide by this to get Unit
	Get        func(SoakSample) float64
	// MustBeFlat: issue 21 asks this series to be flat after warm-up.
	MustBeFlat bool
}

var soakSeriesList = []soakSeries{
	{"RSS", "MB", 1 << 20, func(s SoakSample) float64 { return float64(s.RSS) }, true},
	{"Go heap (live)", "MB", 1 << 20, func(s SoakSample) float64 { return float64(s.HeapLive) }, true},
	{"RSS: pages of the binary", "MB", 1 << 20, func(s SoakSample) float64 { return float64(s.RSSFile) }, false},
	{"RSS: anonymous", "MB", 1 << 20, func(s SoakSample) float64 { return float64(s.RSSAnon) }, true},
	{"Go runtime (mapped)", "MB", 1 << 20, func(s SoakSample) float64 { return float64(s.GoMapped) }, false},
	{"Anonymous − Go runtime (≈ SQLite)", "MB", 1 << 20, func(s SoakSample) float64 { return float64(s.RSSAnon - s.GoMapped) }, false},
	{"Goroutines", "", 1, func(s SoakSample) float64 { return float64(s.Goroutines) }, true},
	{"OS threads", "", 1, func(s SoakSample) float64 { return float64(s.Threads) }, false},
	{"Open files", "", 1, func(s SoakSample) float64 { return float64(s.OpenFiles) }, true},
	{"SQLite file", "MB", 1 << 20, func(s SoakSample) float64 { return float64(s.DBFile) }, false},
	{"SQLite WAL", "MB", 1 << 20, func(s SoakSample) float64 { return float64(s.WALFile) }, false},
	{"Tasks", "", 1, func(s SoakSample) float64 { return float64(s.Tasks) }, false},
	{"Backlog (put − accounted)", "msgs", 1, func(s SoakSample) float64 { return float64(s.Put - s.Accounted) }, false},
}

// fit is a least-squares line through a series after warm-up.
type fit struct {
	n                          int
	mean, slope, resid, lo, hi float64 // slope per hour; resid: residual standard deviation
	first, last                float64
	mx                         float64 // mean time of the window, hours
	span                       float64 // hours the fit covers
}

func fitSeries(ss []SoakSample, warm, end time.Duration, get func(SoakSample) float64) fit {
	var xs, ys []float64
	for _, s := range ss {
		if s.At < warm || s.At > end {
			continue
		}
		xs = append(xs, s.At.Hours())
		ys = append(ys, get(s))
	}
	f := fit{n: len(xs), lo: math.Inf(1), hi: math.Inf(-1)}
	if f.n < 3 {
		return f
	}
	var sx, sy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		f.lo, f.hi = math.Min(f.lo, ys[i]), math.Max(f.hi, ys[i])
	}
	mx, my := sx/float64(f.n), sy/float64(f.n)
	var sxx, sxy float64
	for i := range xs {
		sxx += (xs[i] - mx) * (xs[i] - mx)
		sxy += (xs[i] - mx) * (ys[i] - my)
	}
	f.mean, f.mx, f.first, f.last, f.span = my, mx, ys[0], ys[f.n-1], xs[f.n-1]-xs[0]
	if sxx > 0 {
		f.slope = sxy / sxx
	}
	var rss float64
	for i := range xs {
		r := ys[i] - (my + f.slope*(xs[i]-mx))
		rss += r * r
	}
	f.resid = math.Sqrt(rss / float64(f.n-2))
	return f
}

// flat: the drift the slope predicts over the window is within twice
// the noise around the line, or within 2 % of the mean.
func (f fit) flat() bool {
	drift := math.Abs(f.slope * f.span)
	return drift <= 2*f.resid || drift <= 0.02*math.Abs(f.mean)
}

// loadEnd is when the load ended (the last sample before the drain).
func (r *SoakResult) loadEnd() time.Duration { return r.Config.Duration }

// WriteSoakMarkdown writes the report; svgName is the plot's file name,
// relative to the report.
func (r *SoakResult) WriteSoakMarkdown(w io.Writer, svgName, csvName string) error {
	var b strings.Builder
	c := r.Config
	b.WriteString("# Soak: one worker, the embedded default, under a breathing load\n\n")
	fmt.Fprintf(&b, "Recorded %s with `make soak DURATION=%s` (`cd bench && go run ./cmd/soak`), adaptq revision %s, on %s (%d logical cores, %s; load average %s at the start). ",
		r.Start.UTC().Format("2006-01-02 15:04 MST"), c.Duration, r.Revision, cell(r.Machine.CPU), r.Machine.Cores, r.Machine.Go, r.Machine.Load)
	fmt.Fprintf(&b, "The workload of issue 21: one queue on SQLite (`sqlite://…?queue=%s`, every other setting the default: batch 32, visibility 30 s, concurrency 64, proportional pool 1..100) with the push trigger on; "+
		"%d messages a second plus a burst of %d every %s; %.1f %% of handlers slow (%s–%s), %.1f %% failing on their first run only, %.1f %% failing permanently (poisoned). ",
		soakQueue, SoakRate, SoakBurst, SoakBurstEvery, SoakSlowPerMille/10.0, SoakSlowMin, SoakSlowMax, SoakFailOncePerMille/10.0, SoakPermanentPerMille/10.0)
	fmt.Fprintf(&b, "The producer runs in the worker's process (as a handler that passes work on would); its books are allocated before the start. "+
		"An operator empties the poison queue every %s, counting what it finds, as a deployment does with its poison tools (a poison queue kept forever grows the file, and SQLite's page cache with it, by design). "+
		"Sampled every %s; slopes are least-squares lines through the samples from %s (warm-up) to the end of the load, and a series is called flat when the drift the slope predicts over that window is within twice the scatter around the line or within 2 %% of its mean.\n\n",
		SoakPoisonDrainEvery, SoakSampleEvery, c.Warmup)

	ok := r.Lost == 0 && r.Dups == 0 && r.PoisonedWrongly == 0 && r.PoisonDups == 0
	b.WriteString("| Accounting | |\n|---|---|\n")
	fmt.Fprintf(&b, "| Messages put | %d |\n", r.Put)
	fmt.Fprintf(&b, "| Handled (distinct) | %d |\n", r.Handled)
	fmt.Fprintf(&b, "| Poisoned (distinct; all permanent failures) | %d (%d not permanent, %d extra copies) |\n", r.Poisoned, r.PoisonedWrongly, r.PoisonDups)
	fmt.Fprintf(&b, "| **Lost** | **%d** |\n", r.Lost)
	fmt.Fprintf(&b, "| **Handled more than once** | **%d** |\n", r.Dups)
	fmt.Fprintf(&b, "| Failed once by design, then handled; slow runs | %d; %d |\n", r.FailedOnce, r.Slow)
	fmt.Fprintf(&b, "| Drain after the load (every message accounted for) | %s |\n", r.Drained.Round(time.Second))
	fmt.Fprintf(&b, "| Shutdown | %s |\n", r.Shutdown.Round(time.Millisecond))
	if len(r.Stats) > 0 {
		fmt.Fprintf(&b, "| Listener | %s |\n", statsLine(r.Stats))
	}
	fmt.Fprintf(&b, "| Verdict | %s |\n\n", map[bool]string{true: "every message accounted for: handled once or poisoned, none lost", false: "**accounting failed**"}[ok])

	b.WriteString("| Series (after warm-up) | First | Last | Min | Max | Slope per hour | Scatter (σ) | Flat |\n|---|---|---|---|---|---|---|---|\n")
	for _, s := range soakSeriesList {
		f := fitSeries(r.Samples, c.Warmup, r.loadEnd(), s.Get)
		if f.n < 3 {
			fmt.Fprintf(&b, "| %s | too few samples | | | | | | |\n", s.Name)
			continue
		}
		u := s.Unit
		if u != "" {
			u = " " + u
		}
		v := func(x float64) string { return fmt.Sprintf("%.2f%s", x/s.Scale, u) }
		if s.Scale == 1 {
			v = func(x float64) string { return fmt.Sprintf("%.0f%s", x, u) }
		}
		flat := "yes"
		if !f.flat() {
			flat = "no"
		}
		if !s.MustBeFlat {
			flat += " (not required)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %+.3f%s | %.3f%s | %s |\n", s.Name, v(f.first), v(f.last), v(f.lo), v(f.hi),
			f.slope/s.Scale, u, f.resid/s.Scale, u, flat)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "![The soak's series over time](%s)\n\n", svgName)
	fmt.Fprintf(&b, "Every sample: [%s](%s).\n", csvName, csvName)
	_, err := io.WriteString(w, b.String())
	return err
}

func statsLine(m map[string]int64) string {
	keys := []string{"processed", "failed", "deleted", "poisoned", "renewed", "leases_lost", "receipt_mismatches", "not_found", "delete_errors", "get_errors", "empty_gets", "triggers", "work_detected", "tasks_started"}
	var parts []string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %d", strings.ReplaceAll(k, "_", " "), v))
		}
	}
	return strings.Join(parts, ", ")
}

// WriteSoakCSV writes every sample.
func (r *SoakResult) WriteSoakCSV(w io.Writer) error {
	var b strings.Builder
	b.WriteString("seconds,rss_bytes,rss_anon_bytes,rss_file_bytes,heap_live_bytes,go_mapped_bytes,goroutines,threads,open_files,db_bytes,wal_bytes,shm_bytes,put,accounted,tasks\n")
	for _, s := range r.Samples {
		fmt.Fprintf(&b, "%.0f,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d\n", s.At.Seconds(), s.RSS, s.RSSAnon, s.RSSFile, s.HeapLive, s.GoMapped,
			s.Goroutines, s.Threads, s.OpenFiles, s.DBFile, s.WALFile, s.SHMFile, s.Put, s.Accounted, s.Tasks)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteSoakSVG draws every series over time, one small panel each, with
// the warm-up shaded, the end of the load marked and the fitted line.
func (r *SoakResult) WriteSoakSVG(w io.Writer) error {
	const (
		cols, pw, ph   = 2, 420, 150
		ml, mr, mt, mb = 56, 12, 26, 24
	)
	rows := (len(soakSeriesList) + cols - 1) / cols
	W, H := cols*pw, rows*ph
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	var tmax float64
	for _, s := range r.Samples {
		tmax = math.Max(tmax, s.At.Minutes())
	}
	if tmax <= 0 {
		tmax = 1
	}
	for k, s := range soakSeriesList {
		x0, y0 := (k%cols)*pw, (k/cols)*ph
		iw, ih := float64(pw-ml-mr), float64(ph-mt-mb)
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, sm := range r.Samples {
			v := s.Get(sm) / s.Scale
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		if math.IsInf(lo, 0) {
			continue
		}
		if lo > 0 && lo < hi*0.5 || lo >= 0 && hi-lo < 1e-9 {
			lo = 0
		}
		if hi-lo < 1e-9 {
			hi = lo + 1
		}
		pad := (hi - lo) * 0.05
		hi += pad
		if lo != 0 {
			lo -= pad
		}
		px := func(t float64) float64 { return float64(x0+ml) + t/tmax*iw }
		py := func(v float64) float64 { return float64(y0+mt) + (1-(v-lo)/(hi-lo))*ih }
		title := s.Name
		if s.Unit != "" {
			title += " (" + s.Unit + ")"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", x0+ml, y0+16, xmlEscape(title))
		// Warm-up and drain shading.
		warm := math.Min(r.Config.Warmup.Minutes(), tmax)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%.0f" fill="#eee"/>`+"\n", px(0), y0+mt, px(warm)-px(0), ih)
		if end := r.loadEnd().Minutes(); end < tmax {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%.0f" fill="#f4f0e6"/>`+"\n", px(end), y0+mt, px(tmax)-px(end), ih)
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", x0+ml, y0+mt, iw, ih)
		for _, v := range []float64{lo, (lo + hi) / 2, hi} {
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", x0+ml-4, py(v)+4, tick(v))
		}
		for _, t := range []float64{0, tmax / 2, tmax} {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%.0f min</text>`+"\n", px(t), y0+ph-8, t)
		}
		var pts strings.Builder
		for _, sm := range r.Samples {
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(sm.At.Minutes()), py(s.Get(sm)/s.Scale))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="#1f5fa8" stroke-width="1.2" points="%s"/>`+"\n", strings.TrimSpace(pts.String()))
		if f := fitSeries(r.Samples, r.Config.Warmup, r.loadEnd(), s.Get); f.n >= 3 {
			// The fitted line over the window, through the mean at its middle.
			t1, t2 := r.Config.Warmup.Hours(), math.Min(r.loadEnd().Hours(), tmax/60)
			y := func(t float64) float64 { return (f.mean + f.slope*(t-f.mx)) / s.Scale }
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#c33" stroke-width="1" stroke-dasharray="4 3"/>`+"\n",
				px(t1*60), py(y(t1)), px(t2*60), py(y(t2)))
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func tick(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// revision is the VCS revision the binary was built from, if recorded.
func revision() string {
	rev, dirty := "unknown", false
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = &debug.BuildInfo{}
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
			if len(rev) > 12 {
				rev = rev[:12]
			}
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "unknown" {
		// go run stamps no VCS information: ask git.
		if out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output(); err == nil {
			rev = strings.TrimSpace(string(out))
			if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
				dirty = len(strings.TrimSpace(string(st))) > 0
			}
		}
	}
	if dirty {
		rev += " (with uncommitted changes)"
	}
	return rev
}

// SoakLatest is the last soak's report (bench/soak/latest.md), committed
// with its plot; BENCHMARKS.md embeds it, so that `make bench`, which
// rewrites the whole file, keeps it.
//
//go:embed soak/latest.md
var SoakLatest string

// EmbeddingLatest is the section of BENCHMARKS.md on what embedding adaptq
// costs a program (binary size, packages, cold build), measured by hand
// against a past revision: BENCHMARKS.md embeds it before the soak, so
// that `make bench` keeps it.
//
//go:embed embedding.md
var EmbeddingLatest string

// ThroughputLatest is the section of BENCHMARKS.md on issue 34's SQLite
// drain, measured by hand (drainprobe, callgrind) on a loaded machine:
// BENCHMARKS.md embeds it before the embedding section, so that `make
// bench` keeps it.
//
//go:embed throughput.md
var ThroughputLatest string

// FlowControlLatest is the section of BENCHMARKS.md on a downstream that
// slows down (fixed vs adaptive concurrency, issue 32): the output of
// `adaptq simulate --scenario slowdown`, kept by `make bench` as the
// embedding section is.
//
//go:embed flowcontrol.md
var FlowControlLatest string

// SoakHeading starts the soak's section in BENCHMARKS.md.
const SoakHeading = "## Soak:"

// SoakSection is a soak report (latest.md) as the last section of
// BENCHMARKS.md: its heading a level down, its links relative to the
// repository's root. Empty for an empty report.
func SoakSection(md string) string {
	s := strings.TrimSpace(md)
	if s == "" {
		return ""
	}
	s = strings.Replace(s, "# Soak:", SoakHeading, 1)
	s = strings.ReplaceAll(s, "](latest.", "](bench/soak/latest.")
	return s + "\n\n<sub>Not rerun by `make bench`: embedded from `bench/soak/latest.md`, which `make soak` rewrites.</sub>\n"
}

// ReplaceSoakSection puts section in place of the soak section of a
// BENCHMARKS.md (everything from its heading on), or after its end.
func ReplaceSoakSection(doc, section string) string {
	if i := strings.Index(doc, "\n"+SoakHeading); i >= 0 {
		doc = doc[:i+1]
	}
	if !strings.HasSuffix(doc, "\n\n") {
		doc = strings.TrimRight(doc, "\n") + "\n\n"
	}
	return doc + section
}
