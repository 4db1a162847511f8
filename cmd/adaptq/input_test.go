package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/adaptq/adaptq"
)

// TestEnqueueHelpExampleWritesTheWorkersQueue runs the --url example of
// `enqueue --help` from the root of a copy of the repository's configs: it
// must put to the file configs/adaptq.yaml's worker reads (relative to the
// config's directory: configs/data/adaptq.db), and find that worker's
// config. The example named ./data/adaptq.db, another file, and then said
// that no config names the queue.
func TestEnqueueHelpExampleWritesTheWorkersQueue(t *testing.T) {
	help := mustCLI(t, "", "enqueue", "--help").stdout
	m := regexp.MustCompile(`--url '(sqlite:[^']+)'`).FindStringSubmatch(help)
	if m == nil {
		t.Fatalf("enqueue --help has no --url 'sqlite:…' example:\n%s", help)
	}
	example := m[1]
	data, err := os.ReadFile("../../configs/adaptq.yaml")
	if err != nil {
		t.Fatal(err)
	}
	yaml := strings.Replace(string(data), "address: 127.0.0.1:8089", `address: ""`, 1)
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "configs"), 0o750); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(root, "configs", "adaptq.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(configEnv, "")
	t.Chdir(root)

	r := mustCLI(t, "", "enqueue", "--url", example, "order 1001")
	if strings.Contains(r.stdout, "no config names this queue") {
		t.Errorf("the example's queue is not the config's: %q", r.stdout)
	}
	cfg, err := adaptq.LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := queueDepthOf(t, cfg.Queues[0].URL); n != 1 {
		t.Errorf("the worker's queue (%s) holds %d messages after the example's put, want 1", cfg.Queues[0].URL, n)
	}
}

// TestInputsRefused: what the CLI refuses, each with an error that names
// the input and says what to write instead (exit 2).
func TestInputsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	abs := "sqlite://" + filepath.Join(dir, "q.db") + "?queue=orders"
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		// One slash: the driver read /data/q.db, at the filesystem's root.
		{"one slash", []string{"enqueue", "--url", "sqlite:" + filepath.Join(dir, "one.db") + "?queue=orders", "x"},
			[]string{"sqlite:" + filepath.Join(dir, "one.db"), "sqlite:///", "sqlite://./"}},
		{"ttl zero", []string{"enqueue", "--url", abs, "--ttl", "0s", "x"}, []string{"--ttl", "0s", "never"}},
		{"ttl zero, bare", []string{"enqueue", "--url", abs, "--ttl", "0", "x"}, []string{"--ttl"}},
		{"typo with flags", []string{"enque", "--queue", "orders", "x"}, []string{`unknown command "enque"; did you mean "enqueue"?`}},
		{"typo alone", []string{"migrat"}, []string{`did you mean "migrate"?`, "migrate"}},
		{"no command", nil, []string{"migrate", "poison"}},
	} {
		r := cli(t, "", tc.args...)
		if r.code != exitUsage {
			t.Errorf("%s: adaptq %s: exit %d, want %d; stderr %q", tc.name, strings.Join(tc.args, " "), r.code, exitUsage, r.stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: adaptq %s: stderr %q does not say %q", tc.name, strings.Join(tc.args, " "), r.stderr, w)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "one.db")); err == nil {
		t.Error("sqlite:/PATH created the file")
	}
	if _, err := os.Stat(filepath.Join(dir, "q.db")); err == nil {
		t.Error("--ttl 0s put a message")
	}
	// The typo's suggestion lists every command, migrate included.
	r := cli(t, "", "enque")
	for _, c := range []string{"run", "enqueue", "peek", "stats", "purge", "poison", "simulate", "version", "migrate"} {
		if !strings.Contains(r.stderr, c) {
			t.Errorf("unknown command: the list %q leaves out %s", r.stderr, c)
		}
	}
	// sqlite:///abs and sqlite://./rel still work.
	mustCLI(t, "", "enqueue", "--url", abs, "x")
}
