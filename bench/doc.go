// Package bench is adaptq's benchmark harness: it measures adaptq side by
// side with its baselines (a hand-written get/delete loop) and a peer
// (goqite, on the same SQLite driver and pragmas) in one run on one
// machine, and writes every figure of BENCHMARKS.md as Markdown tables.
//
// Performance claims count only as ratios measured in the same run, so
// each section runs its baseline and adaptq back to back (interleaved where
// they repeat) and reports the ratio next to the raw figures. Every row
// says what was run, the figure, the target and whether it holds; a target
// missed on a loaded machine is reported as missed, with the measured
// reason, never hidden.
//
// A section is a func (SectionFunc) registered in Sections; the report
// renders whatever the funcs return, so a new backend's section (Azurite)
// is one more func. Sizes scale every section: DefaultSizes is what
// `make bench` runs (under ten minutes), TinySizes what the package's test
// runs (seconds), and the command's flags override each size.
//
// Peak memory is measured in child processes (the harness re-executes its
// own binary with ADAPTQ_BENCH_CHILD set), so the harness's own heap does
// not pollute VmHWM.
//
// The command is ./cmd/benchreport:
//
//	cd bench && go run ./cmd/benchreport -o ../BENCHMARKS.md
package bench
