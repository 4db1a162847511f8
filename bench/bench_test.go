package bench_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/bench"
)

func TestMain(m *testing.M) {
	bench.RunChildIfAsked() // peak-RSS children are this test binary again
	os.Exit(m.Run())
}

// figures are the rows each section must have, by a part of their "What
// was run" cell: one per figure of BENCHMARKS.md.
var figures = map[string][]string{
	"overhead": {
		"plain loop, 1 worker:", "listener, 1 task, concurrency", "listener ÷ plain loop, 1 task",
		"plain loop, 4 workers:", "listener, 4 tasks, concurrency", "listener ÷ plain loop, 4 tasks",
		"peak RSS: a Go process that does nothing", "no consumer", "drained by the plain loop, 1 worker",
		"drained by the listener, 1 task", "drained by the listener, 4 tasks",
	},
	"embedded": {
		"goqite loop, 1 consumer", "adaptq listener, 1 task", "goqite loop, 4 consumers", "adaptq listener, 4 tasks",
		"goqite jobs runner, Limit", "adaptq listener (1 task) ÷ goqite loop (1 consumer)",
		"adaptq listener (4 tasks) ÷ goqite loop (4 consumers)", "adaptq listener (1 task) ÷ goqite jobs runner",
		"goqite batched (ReceiveTx/DeleteTx, 32 per transaction), 1 consumer", "adaptq listener (1 task) ÷ goqite batched (1 consumer)",
		"200 B: goqite batched", "200 B: adaptq listener, 1 task", "200 B: adaptq listener ÷ goqite batched",
		"200 B: River v0.51.1 on SQLite", "200 B: adaptq listener ÷ River on SQLite",
		"4 KiB: goqite batched", "4 KiB: adaptq listener, 1 task", "4 KiB: adaptq listener ÷ goqite batched",
		"64 KiB: goqite batched", "64 KiB: adaptq listener, 1 task", "64 KiB: adaptq listener ÷ goqite batched",
		"64 KiB: adaptq bytes written per message drained",
	},
	"azurite": {
		"Put, 16 producers", "naive loop (“Queues in Windows Azure Storage”)", "hand-written loop: 16 goroutines", "listener: 16 tasks",
		"listener ÷ hand-written loop", "listener ÷ naive loop", "listener's calls per message on Azure",
		"30ms per request: hand-written loop", "30ms per request: listener:", "30ms per request: listener ÷ hand-written loop",
	},
	"sqs": {
		"Put, 16 producers", "hand-written loop: 16 goroutines", "listener: 16 tasks", "listener ÷ hand-written loop",
		"listener's calls per message at saturation", "an idle listener task",
	},
	"calls": {
		"memory driver, Azure-like", "memory driver, batch delete", "SQLite driver, Azure-like", "SQLite driver, batch delete",
	},
	"burst": {
		"with the push trigger: burst landed → pool", "with the push trigger: burst landed → queue empty",
		"without a trigger (idle.max 100ms): burst landed → pool", "without a trigger (idle.max 100ms): burst landed → queue empty",
	},
	"work": {
		"handler no-op, concurrency 1", "handler no-op, concurrency 16", "handler no-op, concurrency 128",
		"handler sleep 1ms, concurrency 1", "handler sleep 1ms, concurrency 16", "handler sleep 1ms, concurrency 128",
		"handler sleep 10ms, concurrency 1", "handler sleep 10ms, concurrency 16", "handler sleep 10ms, concurrency 128",
	},
	"raw": {
		"SQLite: Put, 1 producer", "SQLite: Put, 4 producers", "SQLite: Get(32)+DeleteBatch, 1 consumer",
		"SQLite: Get(32)+DeleteBatch, 4 consumers", "SQLite: mixed", "memory: Put, 1 producer",
		"memory: Get(32)+DeleteBatch, 1 consumer", "memory: Get(32)+DeleteBatch, 4 consumers", "memory: mixed",
	},
	"steady": {
		"SQLite, 50 msgs/s, trigger:", "SQLite, 200 msgs/s, trigger:", "SQLite, 2,000 msgs/s, trigger:",
		"SQLite, 50 msgs/s, no trigger", "SQLite, 200 msgs/s, no trigger", "SQLite, 2,000 msgs/s, no trigger",
		"memory, 50 msgs/s, trigger:", "memory, 200 msgs/s, trigger:", "memory, 2,000 msgs/s, trigger:",
		"memory, 50 msgs/s, no trigger", "memory, 200 msgs/s, no trigger", "memory, 2,000 msgs/s, no trigger",
	},
	"sqlite": {
		"backlog 100: drain", "backlog 100: Count", "backlog 100: file at the peak",
		"backlog 1,000: drain", "backlog 1,000: Count", "backlog 1,000: file at the peak",
		"drain of one file: one process, 1 consumer", "drain of one file: one process, 2 consumers",
		"drain of one file: two processes, 1 consumer each", "two processes ÷ one process (1 consumer)",
		"two processes ÷ one process with 2 consumers",
	},
	"trigger": {
		"isolated wake with the trigger (one message", "isolated wake with the trigger, trickle", "isolated wake without a trigger", "idle calls per hour per process, trigger configured",
		"idle calls per hour per process, no trigger",
	},
	"postgres": {
		"adaptq, PostgreSQL driver + listener", "River v0.51.1 (riverpgxv5)", "adaptq ÷ River, processed jobs/s",
		"hand-written pgx loop", "adaptq (default options) ÷ hand-written loop",
		"adaptq with async_leases=true", "the price of durable leases",
		"CPU per processed job", "adaptq calls per message", "statements sent per message",
		"idle worker, queue calls per hour", "idle River client", "cross-process wake",
		"Get of 1 beside", "(DB.Sweep",
		"long run: ", "long run: n_dead_tup", "long run: Get latency", "one table for many queues",
	},
	"txput": {
		"adaptq: row + postgres.PutTx", "River v0.51.1: row + InsertTx", "adaptq ÷ River, committed transactions/s", "adaptq, the same transaction as one pgx.Batch", "adaptq one-batch transaction ÷ River", "statements (round trips) per transaction", "CPU per transaction",
	},
	"redis": {
		"asynq, concurrency", "adaptq listener on queue/redis", "processed per second, adaptq ÷ asynq", "adaptq calls per message",
		"idle asynq server: commands per minute", "idle adaptq worker: commands per minute",
		"idle adaptq worker: blocking calls per safety interval", "the put's own round trip", "cross-process wake",
	},
	"putbatch": {
		"memory: PutBatch vs Put", "SQLite: PutBatch vs Put", "PostgreSQL: PutBatch vs Put", "Redis: PutBatch vs Put",
		"SQS (fauxqs): PutBatch vs Put", "Azure (Azurite): PutBatch vs Put",
		"SQS whole pipeline with PutBatch", "SQS whole pipeline with Put:",
	},
	"batchhandler": {
		"single handler, one INSERT per message (memory queue)", "batch handler, one INSERT per call (memory queue)",
		"batch ÷ single, messages/s (memory queue)",
		"single handler, one INSERT per message (PostgreSQL queue)", "batch handler, one INSERT per call (PostgreSQL queue)",
		"batch ÷ single, messages/s (PostgreSQL queue)",
	},
}

// TestReportTiny runs every section at tiny sizes and checks the Markdown:
// every section, a row per figure, each row with a figure, the machine
// described. It asserts no timing: at these sizes, and on a loaded
// machine, targets may miss, and the report says so.
func TestReportTiny(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	env := &bench.Env{Sizes: bench.TinySizes(), Dir: t.TempDir(), Self: []string{exe}, Progress: &progress}
	// A guard against a hang only: on a busy machine the tiny run takes
	// minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rep, err := bench.Run(ctx, env, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Failed() {
		t.Errorf("section %s: %v", s.Key, s.Err)
	}
	var b bytes.Buffer
	if err := rep.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	if t.Failed() {
		t.Fatalf("progress:\n%s\nreport:\n%s", progress.String(), md)
	}

	for _, want := range []string{"# adaptq benchmarks", "## Machine", "| CPU |", "| Cores |", "| Go |", "| OS |", "| Date |", "| Load average", "## Summary", "## Embedding:"} {
		if !strings.Contains(md, want) {
			t.Errorf("the report has no %q", want)
		}
	}
	if len(bench.Sections) != len(figures) {
		t.Errorf("%d sections, the test knows %d: add the new section's figures here", len(bench.Sections), len(figures))
	}
	for _, sp := range bench.Sections {
		body, ok := section(md, bench.Heading(sp.Key, sp.Title))
		if !ok {
			t.Errorf("no section %q", bench.Heading(sp.Key, sp.Title))
			continue
		}
		rows := tableRows(body)
		for _, what := range figures[sp.Key] {
			found := false
			for _, r := range rows {
				if mentions(r[0], what) {
					found = true
					if strings.TrimSpace(r[1]) == "" {
						t.Errorf("%s: row %q has no figure", sp.Key, r[0])
					}
				}
			}
			if !found {
				t.Errorf("%s: no row for %q in:\n%s", sp.Key, what, body)
			}
		}
		if len(rows) != len(figures[sp.Key]) {
			t.Errorf("%s: %d rows, want %d", sp.Key, len(rows), len(figures[sp.Key]))
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s", md)
	}
	for _, s := range rep.Sections {
		t.Logf("section %s ran in %s", s.Key, s.Elapsed.Round(time.Millisecond))
	}
}

// mentions reports whether cell contains what, not followed by a digit
// ("concurrency 1" is not "concurrency 16").
func mentions(cell, what string) bool {
	for i := 0; ; {
		j := strings.Index(cell[i:], what)
		if j < 0 {
			return false
		}
		end := i + j + len(what)
		if end == len(cell) || cell[end] < '0' || cell[end] > '9' {
			return true
		}
		i = end
	}
}

// section returns the text under heading, up to the next "## ".
func section(md, heading string) (string, bool) {
	i := strings.Index(md, heading+"\n")
	if i < 0 {
		return "", false
	}
	rest := md[i+len(heading)+1:]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return rest, true
}

// tableRows returns the cells of the table rows of body (header and rule
// left out).
func tableRows(body string) [][]string {
	var out [][]string
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| What was run |") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) < 5 {
			continue
		}
		out = append(out, cells)
	}
	return out
}

func TestSizesValidate(t *testing.T) {
	if err := bench.DefaultSizes().Validate(); err != nil {
		t.Error(err)
	}
	if err := bench.TinySizes().Validate(); err != nil {
		t.Error(err)
	}
	s := bench.TinySizes()
	s.Burst, s.WorkWindow = 0, time.Millisecond
	err := s.Validate()
	if err == nil || !strings.Contains(err.Error(), "-burst 0") || !strings.Contains(err.Error(), "-work-window 1ms") {
		t.Errorf("bad sizes: %v", err)
	}
}
