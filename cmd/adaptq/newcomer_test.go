package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// appConfig writes a config that names its database by a path relative to
// itself, in dir/app, and returns the config's path and the database's.
func appConfig(t *testing.T, dir, extra string) (cfg, db string) {
	t.Helper()
	app := filepath.Join(dir, "app")
	if err := os.MkdirAll(app, 0o750); err != nil {
		t.Fatal(err)
	}
	cfg = filepath.Join(app, "adaptq.yaml")
	yaml := `
log: {level: error}
admin: {address: ""}
queues:
  - url: sqlite://./data/x.db?queue=orders
    handler: "exec: cat"
` + extra
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, filepath.Join(app, "data", "x.db")
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Read-only commands never create a database: a config whose database
// does not exist yet gets "no such file", and nothing appears beside the
// config or in the working directory. enqueue creates it beside the
// config, where every other command (and the worker) then finds it.
func TestReadOnlyCommandsCreateNoDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg, db := appConfig(t, dir, "")
	hadData := exists("data")
	for _, args := range [][]string{
		{"stats", "-c", cfg},
		{"peek", "-c", cfg},
		{"purge", "-c", cfg, "--yes"},
		{"peek", "--url", "sqlite://" + filepath.Join(dir, "nope.db") + "?queue=orders"},
	} {
		r := cli(t, "", args...)
		if r.code == exitOK || !strings.Contains(r.stderr+r.stdout, "no such file") {
			t.Errorf("adaptq %s: exit %d, want a failure that says \"no such file\"\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
	}
	if exists(filepath.Dir(db)) || exists(filepath.Join(dir, "nope.db")) {
		t.Fatalf("a read-only command created a database")
	}
	if !hadData && exists("data") {
		t.Fatalf("a command created data/ in the working directory")
	}

	r := mustCLI(t, "", "enqueue", "-c", cfg, "hello")
	if !exists(db) {
		t.Fatalf("enqueue did not create %s, beside the config: %s", db, r.stdout)
	}
	r = mustCLI(t, "", "stats", "-c", cfg)
	if got := depthTable(r.stdout)["orders"]; got != "1" {
		t.Errorf("stats after one enqueue shows depth %q, want 1:\n%s", got, r.stdout)
	}
}

// A worker that cannot start leaves no database behind: a missing
// program, an admin address in use (named, with what to do).
func TestRunThatFailsAtStartUpCreatesNothing(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() }) // after the parallel subtests
	for _, tc := range []struct {
		name, extra string
		want        []string
	}{
		{"missing program", "    handler: \"exec: /no/such/program\"\n", []string{"queues[0].handler", "/no/such/program"}},
		{"admin address taken", "admin: {address: \"" + ln.Addr().String() + "\"}\n", []string{`admin.address: "` + ln.Addr().String() + `"`, "address already in use", "another process"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg, db := appConfig(t, dir, "")
			if tc.extra != "" {
				data, _ := os.ReadFile(cfg)
				yaml := string(data)
				if strings.HasPrefix(tc.extra, "admin:") {
					yaml = strings.Replace(yaml, "admin: {address: \"\"}\n", tc.extra, 1)
				} else {
					yaml = strings.Replace(yaml, "    handler: \"exec: cat\"\n", tc.extra, 1)
				}
				if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			code, _, errOut := startRun(context.Background(), t, nil, "-c", cfg)
			if c := exitCodeWithin(t, code, errOut); c != exitUsage {
				t.Fatalf("exit %d, want %d\nstderr: %s", c, exitUsage, errOut)
			}
			msg := errOut.String()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("stderr lacks %q:\n%s", w, msg)
				}
			}
			for _, bad := range []string{"adaptq: adaptq:", "1 problem"} {
				if strings.Contains(msg, bad) {
					t.Errorf("stderr says %q:\n%s", bad, msg)
				}
			}
			if exists(filepath.Dir(db)) {
				t.Errorf("the failed run created %s", filepath.Dir(db))
			}
		})
	}
}

// A memory:// queue lives in one process: enqueue would lose the message,
// so every command refuses it and says why.
func TestMemoryQueuesAreRefused(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, t.TempDir(), "admin: {address: \"\"}\nqueues:\n  - url: memory://orders\n    handler: \"exec: cat\"\n")
	for _, args := range [][]string{
		{"enqueue", "--url", "memory://orders", "hi"},
		{"enqueue", "-c", cfg, "hi"},
		{"peek", "--url", "memory://orders"},
	} {
		r := cli(t, "", args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "lives inside one process") || strings.Contains(r.stdout, "put 1") {
			t.Errorf("adaptq %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
	}
	r := cli(t, "", "stats", "-c", cfg)
	if r.code != exitOK || !strings.Contains(r.stdout, "in the worker's process only") {
		t.Errorf("stats of a memory queue: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}

// enqueue says what happened to the trigger, and why when nothing did.
func TestEnqueueSaysWhatItsTriggerDid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, extra, want string }{
		{"no trigger", "    trigger: {enabled: false}\n", "no trigger configured (trigger.enabled is false): the worker finds the messages at its next poll, within idle.max (1m0s)"},
		{"no admin address", "", "worker not triggered: admin.address is empty, so no other process can signal it (it finds the messages within trigger.safety_interval, 1m0s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, _ := appConfig(t, t.TempDir(), tc.extra)
			r := mustCLI(t, "", "enqueue", "-c", cfg, "x")
			if !strings.Contains(r.stdout, tc.want) {
				t.Errorf("enqueue says %q, want %q", r.stdout, tc.want)
			}
		})
	}
	r := mustCLI(t, "", "enqueue", "--url", "sqlite://"+filepath.Join(t.TempDir(), "q.db")+"?queue=orders", "x")
	if !strings.Contains(r.stdout, "no worker triggered") {
		t.Errorf("enqueue --url of a queue no config names says %q", r.stdout)
	}
}

func TestMessagesANewcomerMeets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"enque", "x"}, `unknown command "enque"; did you mean "enqueue"?`},
		{[]string{"enqueue", "--url", "sqlite:///tmp/x.db?queue=q", "--ttl", "8d", "x"}, `Go durations have no days; write "192h"`},
		{[]string{"enqueue", "--url", "sqlite:///tmp/x.db?queue=q", "--delay", "90", "x"}, "a bare number has no unit"},
	} {
		r := cli(t, "", tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("adaptq %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}

	// simulate's help: once, on stdout, with --flags like every command.
	r := mustCLI(t, "", "simulate", "--help")
	if n := strings.Count(r.stdout, "usage: adaptq simulate"); n != 1 || r.stderr != "" {
		t.Errorf("simulate --help printed its usage %d times (stderr %q):\n%s", n, r.stderr, r.stdout)
	}
	if !strings.Contains(r.stdout, "--days int") || strings.Contains(r.stdout, "\n  -days") {
		t.Errorf("simulate --help does not show --flags:\n%s", r.stdout)
	}
}

// enqueue --url of a queue the default config ($ADAPTQ_CONFIG) lists pulls
// that worker's trigger: the URL may write the path another way.
func TestEnqueueByURLTriggersTheConfiguredWorker(t *testing.T) {
	dir := t.TempDir()
	w, cfg := startWorker(t, dir, `
log: {level: error}
admin: {address: "$ADDR"}
queues:
  - url: sqlite://$DIR/q.db?queue=orders
    handler: "exec: cat"
    idle: {min: 1h, max: 1h}
    trigger: {enabled: true, safety_interval: 1h}
`)
	t.Setenv(configEnv, cfg)
	waitUntil(t, "the worker is idle", func() bool {
		l, ok := w.Listener("orders")
		if !ok {
			return false
		}
		st, err := l.State(context.Background())
		return err == nil && st.IdleTasks == 1
	})
	r := mustCLI(t, "", "enqueue", "--url", "sqlite://"+dir+"/./q.db?queue=orders", "wake up")
	if !strings.HasSuffix(r.stdout, "; worker triggered\n") {
		t.Errorf("summary %q does not say the worker was triggered", r.stdout)
	}
	waitUntil(t, "the worker handled the message", func() bool {
		return queueDepthOf(t, "sqlite://"+dir+"/q.db?queue=orders") == 0
	})
}
