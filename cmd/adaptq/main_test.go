package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/testutil"

	"github.com/adaptq/adaptq/queue"
)

type result struct {
	code           int
	stdout, stderr string
}

// cli runs the program in-process through run, as main does.
func cli(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errOut testutil.SyncBuffer
	code := run(args, strings.NewReader(stdin), &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

// mustCLI runs the program and fails the test unless it exits 0.
func mustCLI(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	r := cli(t, stdin, args...)
	if r.code != 0 {
		t.Fatalf("adaptq %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// baseConfig is a worker config on a SQLite file under $DIR, quiet, with
// no admin endpoint and a handler that succeeds.
const baseConfig = `
log: {level: error}
admin: {address: ""}
queues:
  - url: sqlite://$DIR/q.db?queue=orders
    handler: "exec: cat"
    idle: {max: 200ms}
`

// writeConfig writes yaml, with $DIR replaced by dir, to dir/adaptq.yaml.
func writeConfig(t *testing.T, dir, yaml string) string {
	t.Helper()
	path := filepath.Join(dir, "adaptq.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(yaml, "$DIR", dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// queueDepthOf counts the messages of the queue at rawURL.
func queueDepthOf(t *testing.T, rawURL string) int {
	t.Helper()
	q, err := queue.Open(context.Background(), rawURL)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	n, err := q.Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// freeAddress returns a loopback address nothing listens on (now).
func freeAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestBadUsageExitsTwoAndNamesTheProblem(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, baseConfig)
	url := "sqlite://" + dir + "/q.db?queue=orders"
	body := filepath.Join(dir, "body.txt")
	if err := os.WriteFile(body, []byte("from a file"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.bin")
	if err := os.WriteFile(big, make([]byte, queue.DefaultMaxBodySize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	badCfg := writeConfig(t, t.TempDir(), "queues:\n  - url: memory://x\n    batch_size: 33\n")
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		want  []string
	}{
		{"no command", "", nil, []string{"no command given"}},
		{"unknown command", "", []string{"frobnicate"}, []string{`unknown command "frobnicate"`}},
		{"unknown flag", "", []string{"enqueue", "-c", cfg, "--bogus", "x"}, []string{"unknown flag: --bogus"}},
		{"missing body", "", []string{"enqueue", "-c", cfg}, []string{"no body", "--file", "-"}},
		{"two body sources", "", []string{"enqueue", "-c", cfg, "--file", body, "inline"}, []string{"two bodies", `"inline"`, "--file"}},
		{"two positional bodies", "", []string{"enqueue", "-c", cfg, "a", "b"}, []string{"at most 1 argument"}},
		{"ttl without a unit", "", []string{"enqueue", "-c", cfg, "--ttl", "5", "x"}, []string{`"5"`, "--ttl", "not a duration"}},
		{"bad delay", "", []string{"enqueue", "-c", cfg, "--delay", "soon", "x"}, []string{`"soon"`, "--delay"}},
		{"delay not below ttl", "", []string{"enqueue", "-c", cfg, "--ttl", "1h", "--delay", "2h", "x"}, []string{"--delay 2h0m0s", "--ttl"}},
		{"count zero", "", []string{"enqueue", "-c", cfg, "--count", "0", "x"}, []string{"--count 0", "at least 1"}},
		{"unknown queue", "", []string{"enqueue", "-c", cfg, "--queue", "nope", "x"}, []string{`--queue "nope"`, "no such queue", "orders"}},
		{"url and queue", "", []string{"enqueue", "--url", url, "--queue", "orders", "x"}, []string{"--url", "not both"}},
		{"unknown scheme", "", []string{"enqueue", "--url", "nosuch://x", "x"}, []string{"--url", `no driver for scheme "nosuch"`}},
		{"oversized body", "", []string{"enqueue", "-c", cfg, "--file", big}, []string{"--file " + big, "65537 bytes", "limit"}},
		{"oversized line", "ok\n" + strings.Repeat("x", queue.DefaultMaxBodySize+1) + "\n", []string{"enqueue", "-c", cfg, "--lines", "-"}, []string{"line 2 of standard input", "limit"}},
		{"no lines", "\n\n", []string{"enqueue", "-c", cfg, "--lines", "-"}, []string{"--lines", "no non-empty line"}},
		{"missing file", "", []string{"enqueue", "-c", cfg, "--file", filepath.Join(dir, "nope")}, []string{"--file", "no such file"}},
		{"missing config", "", []string{"enqueue", "-c", filepath.Join(dir, "nope.yaml"), "x"}, []string{"nope.yaml"}},
		{"bad config", "", []string{"enqueue", "-c", badCfg, "x"}, []string{"queues[0].batch_size", "33"}},
		{"peek too many", "", []string{"peek", "-c", cfg, "-n", "33"}, []string{"-n 33", "1..32"}},
		{"peek none", "", []string{"peek", "-c", cfg, "-n", "0"}, []string{"-n 0"}},
		{"peek argument", "", []string{"peek", "-c", cfg, "extra"}, []string{"takes no arguments", `"extra"`}},
		{"stats unknown queue", "", []string{"stats", "-c", cfg, "--queue", "nope"}, []string{`--queue "nope"`}},
		{"run bad config", "", []string{"run", "-c", badCfg}, []string{"queues[0].batch_size"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cli(t, tc.stdin, tc.args...)
			if r.code != exitUsage {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, exitUsage, r.stdout, r.stderr)
			}
			if !strings.HasPrefix(r.stderr, "adaptq: ") {
				t.Errorf("stderr does not start with \"adaptq: \": %q", r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
		})
	}
	if n := queueDepthOf(t, url); n != 0 {
		t.Errorf("bad usage wrote %d messages", n)
	}
}

func TestHelpAndVersion(t *testing.T) {
	t.Parallel()
	r := mustCLI(t, "", "--help")
	for _, c := range []string{"run", "enqueue", "peek", "stats", "purge", "version"} {
		if !strings.Contains(r.stdout, c) {
			t.Errorf("help lacks %q:\n%s", c, r.stdout)
		}
	}
	r = mustCLI(t, "", "version")
	if !strings.HasPrefix(r.stdout, "adaptq ") {
		t.Errorf("version: %q", r.stdout)
	}
}

func TestSecretsStayOutOfErrors(t *testing.T) {
	t.Parallel()
	r := cli(t, "", "peek", "--url", "nosuch://user:hunter2@host/q?sig=topsecret")
	if r.code != exitUsage {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, secret := range []string{"hunter2", "topsecret"} {
		if strings.Contains(r.stderr, secret) {
			t.Errorf("stderr shows a secret: %s", r.stderr)
		}
	}
}

func TestSimulate(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"simulate", "--policy", "naive-1,adaptq", "--days", "1"}, strings.NewReader(""), &out, &errb)
	if code != 0 {
		t.Fatalf("simulate: exit %d\n%s", code, errb.String())
	}
	for _, want := range []string{"naive-1", "adaptq", "calls/day", "$/month", "p99"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("simulate output lacks %q:\n%s", want, out.String())
		}
	}
	errb.Reset()
	if code := run([]string{"simulate", "--policy", "nope"}, strings.NewReader(""), &out, &errb); code != 2 || !strings.Contains(errb.String(), `"nope"`) {
		t.Fatalf("simulate --policy nope: exit %d, %q", code, errb.String())
	}
	if strings.Contains(errb.String(), "exit 2") {
		t.Errorf("the exit code leaked into the message: %q", errb.String())
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, cond)
}
