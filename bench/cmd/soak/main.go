// Command soak runs issue 21's soak: one worker on the embedded default
// (SQLite, push trigger on) under a steady load with bursts, slow and
// failing handlers, sampling memory, goroutines, open files and the SQLite
// files every 10 s, and ending with every message accounted for. It writes
// a report with a plot and every sample.
//
//	make soak DURATION=1h                          # writes bench/soak/latest.{md,svg,csv} and BENCHMARKS.md's soak section
//	cd bench && go run ./cmd/soak -duration 2m -o /tmp/soak   # a short trial elsewhere
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/adaptq/adaptq/bench"
)

func main() {
	duration := flag.Duration("duration", time.Hour, "how long the load runs")
	warmup := flag.Duration("warmup", 0, "left out of the slopes (default a sixth of the duration, 1..10 min)")
	dir := flag.String("dir", "", "directory of the SQLite file (default a fresh temporary one)")
	out := flag.String("o", "soak", "directory the report is written to (latest.md, latest.svg, latest.csv)")
	benchmarks := flag.String("benchmarks", "", "also put the report in this BENCHMARKS.md, in place of its soak section")
	heapProfiles := flag.String("heap-profiles", "", "write a heap profile (after a GC) to this directory every -profile-every")
	profileEvery := flag.Duration("profile-every", 10*time.Minute, "how often -heap-profiles writes one")
	embedOnly := flag.Bool("embed-only", false, "run nothing: put the report in -o into -benchmarks")
	flag.Parse()
	if *heapProfiles != "" {
		// Sample every 4 KiB allocated instead of every 512 KiB, so that a
		// diff of two profiles shows growth of a few hundred kilobytes.
		runtime.MemProfileRate = 4096
	}
	embed := func() {
		if *benchmarks == "" {
			return
		}
		md, err := os.ReadFile(filepath.Join(*out, "latest.md"))
		if err == nil {
			var doc []byte
			if doc, err = os.ReadFile(*benchmarks); err == nil {
				err = os.WriteFile(*benchmarks, []byte(bench.ReplaceSoakSection(string(doc), bench.SoakSection(string(md)))), 0o644)
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			os.Exit(1)
		}
	}
	if *embedOnly {
		embed()
		return
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench.RunSoak(ctx, bench.SoakConfig{
		Duration: *duration, Warmup: *warmup, Dir: *dir, HeapProfiles: *heapProfiles, ProfileEvery: *profileEvery,
		Progress: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	write := func(name string, f func(*os.File) error) {
		fh, err := os.Create(filepath.Join(*out, name))
		if err == nil {
			err = f(fh)
			if cerr := fh.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			os.Exit(1)
		}
	}
	write("latest.csv", func(f *os.File) error { return res.WriteSoakCSV(f) })
	write("latest.svg", func(f *os.File) error { return res.WriteSoakSVG(f) })
	write("latest.md", func(f *os.File) error { return res.WriteSoakMarkdown(f, "latest.svg", "latest.csv") })
	embed()
	fmt.Fprintf(os.Stderr, "soak: %d put, %d handled, %d poisoned, %d lost, %d handled twice; report in %s\n",
		res.Put, res.Handled, res.Poisoned, res.Lost, res.Dups, filepath.Join(*out, "latest.md"))
	if res.Lost > 0 || res.Dups > 0 || res.PoisonedWrongly > 0 || res.PoisonDups > 0 {
		os.Exit(1)
	}
}
