// Command benchreport runs adaptq's benchmark harness and writes
// BENCHMARKS.md: every figure measured in one run on this machine, adaptq
// side by side with its baselines and goqite.
//
//	cd bench && go run ./cmd/benchreport -o ../BENCHMARKS.md   # what make bench runs
//	go run ./cmd/benchreport -tiny -o /tmp/b.md                # every section in seconds
//	go run ./cmd/benchreport -only overhead,trigger            # some sections
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/adaptq/adaptq/bench"
)

func main() {
	bench.RunChildIfAsked()

	sizes := bench.DefaultSizes()
	if tinyRequested(os.Args[1:]) {
		sizes = bench.TinySizes()
	}
	fs := flag.NewFlagSet("benchreport", flag.ExitOnError)
	out := fs.String("o", "BENCHMARKS.md", "file to write the report to (- for standard output)")
	only := fs.String("only", "", "comma-separated section keys to run (default all): "+keys())
	dir := fs.String("dir", "", "scratch directory for database files (default a fresh temporary one)")
	quiet := fs.Bool("q", false, "no progress on standard error")
	fs.Bool("tiny", false, "tiny sizes: every section in seconds, figures meaningless (size flags still override)")
	sizes.RegisterFlags(fs)
	_ = fs.Parse(os.Args[1:])
	if err := sizes.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}

	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
	env := &bench.Env{Sizes: sizes, Dir: *dir, Self: []string{self}}
	if !*quiet {
		env.Progress = os.Stderr
	}
	var keys []string
	if *only != "" {
		keys = strings.Split(*only, ",")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, env, keys)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
	var b bytes.Buffer
	if err := rep.WriteMarkdown(&b); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
	if *out == "-" {
		_, err = os.Stdout.Write(b.Bytes())
	} else {
		err = os.WriteFile(*out, b.Bytes(), 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
	if failed := rep.Failed(); len(failed) > 0 {
		for _, s := range failed {
			fmt.Fprintf(os.Stderr, "benchreport: section %s could not be measured: %v\n", s.Key, s.Err)
		}
		os.Exit(1)
	}
}

// tinyRequested looks for -tiny before flags are parsed, so that it picks
// the defaults the other flags override.
func tinyRequested(args []string) bool {
	for _, a := range args {
		switch a {
		case "-tiny", "--tiny", "-tiny=true", "--tiny=true":
			return true
		case "--":
			return false
		}
	}
	return false
}

func keys() string {
	var ks []string
	for _, s := range bench.Sections {
		ks = append(ks, s.Key)
	}
	return strings.Join(ks, ", ")
}
