package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// TestMigrate: migrate --check reports pending migrations (exit 1), migrate
// applies them once, and a worker URL with migrate=false then opens; before
// that, it is refused.
func TestMigrate(t *testing.T) {
	schema := pgtest.Schema(t)
	u := pgtest.QueueURL(t, schema, "orders", "migrate=false")

	if _, err := queue.Open(context.Background(), u); !errors.Is(err, postgres.ErrSchemaOutdated) {
		t.Fatalf("open with migrate=false before adaptq migrate: %v, want ErrSchemaOutdated", err)
	}
	r := cli(t, "", "migrate", "--url", u, "--check")
	if r.code != exitFailure || !strings.Contains(r.stdout, "pending") {
		t.Fatalf("migrate --check before: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = mustCLI(t, "", "migrate", "--url", u)
	if !strings.Contains(r.stdout, "migrated from version 0 to") {
		t.Fatalf("migrate: %q", r.stdout)
	}
	r = mustCLI(t, "", "migrate", "--url", u)
	if !strings.Contains(r.stdout, "up to date") {
		t.Fatalf("migrate again: %q", r.stdout)
	}
	mustCLI(t, "", "migrate", "--url", u, "--check")

	q, err := queue.Open(context.Background(), u)
	if err != nil {
		t.Fatalf("open with migrate=false after adaptq migrate: %v", err)
	}
	defer q.Close()
	if _, err := q.Put(context.Background(), []byte("x"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateFromConfig migrates the schemas of a config's postgres://
// queues, each once, and refuses a config without any.
func TestMigrateFromConfig(t *testing.T) {
	schema := pgtest.Schema(t)
	dir := t.TempDir()
	cfg := writeConfig(t, dir, `
log: {level: error}
admin: {address: ""}
queues:
  - url: `+pgtest.QueueURL(t, schema, "orders", "")+`
    handler: "exec: cat"
  - url: `+pgtest.QueueURL(t, schema, "invoices", "")+`
    handler: "exec: cat"
`)
	r := mustCLI(t, "", "migrate", "--config", cfg)
	if n := strings.Count(r.stdout, "migrated"); n != 1 {
		t.Fatalf("two queues of one schema: %d migrations reported:\n%s", n, r.stdout)
	}
	sqliteOnly := writeConfig(t, dir, baseConfig)
	if r := cli(t, "", "migrate", "--config", sqliteOnly); r.code != exitUsage {
		t.Fatalf("a config without postgres queues: exit %d, want %d", r.code, exitUsage)
	}
}

// TestPostgresExampleConfig runs configs/postgres.yaml as it is, but for
// the schema (the test's own): the worker handles a message put by
// another connection, woken by the database's notification.
func TestPostgresExampleConfig(t *testing.T) {
	data, err := os.ReadFile("../../configs/postgres.yaml")
	if err != nil {
		t.Fatal(err)
	}
	schema := pgtest.Schema(t)
	yaml := strings.Replace(string(data), "schema=adaptq_example", "schema="+schema, 1)
	yaml = strings.Replace(yaml, "address: 127.0.0.1:8089", `address: ""`, 1)
	yaml = strings.Replace(yaml, "level: info", "level: error", 1)
	if strings.Count(yaml, schema) != 1 {
		t.Fatal("configs/postgres.yaml no longer names schema=adaptq_example")
	}
	cfg, err := adaptq.ParseConfig("postgres.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	u := cfg.Queues[0].URL
	if !strings.HasPrefix(u, pgtest.URL(t)[:strings.Index(pgtest.URL(t), "?")]) {
		t.Skipf("the example's server %s is not the test server", queue.Redact(u))
	}
	w, err := adaptq.New(cfg, adaptq.WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	<-w.Ready()
	q, err := queue.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.Put(ctx, []byte("order 1001"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the example worker to handle the message", func() bool {
		n, err := q.Count(ctx)
		return err == nil && n == 0
	})
}

// TestMigrateExampleConfigAsItIs runs the README's `adaptq migrate --config
// configs/postgres.yaml` (with the test's schema): the URL's pgx pool
// parameter (pool_max_conns) must not reach the server, which refused it as
// an unknown configuration parameter.
func TestMigrateExampleConfigAsItIs(t *testing.T) {
	data, err := os.ReadFile("../../configs/postgres.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "pool_max_conns=") {
		t.Fatal("configs/postgres.yaml no longer sets pool_max_conns: this test lost its point")
	}
	schema := pgtest.Schema(t)
	yaml := strings.Replace(string(data), "schema=adaptq_example", "schema="+schema, 1)
	cfg, err := adaptq.ParseConfig("postgres.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if u := cfg.Queues[0].URL; !strings.HasPrefix(u, pgtest.URL(t)[:strings.Index(pgtest.URL(t), "?")]) {
		t.Skipf("the example's server %s is not the test server", queue.Redact(u))
	}
	path := writeConfig(t, t.TempDir(), yaml)
	if r := cli(t, "", "migrate", "--config", path, "--check"); r.code != exitFailure || !strings.Contains(r.stdout, "pending") {
		t.Fatalf("migrate --check: exit %d, stdout %q, stderr %q; want exit 1 and pending", r.code, r.stdout, r.stderr)
	}
	r := mustCLI(t, "", "migrate", "--config", path)
	if !strings.Contains(r.stdout, "migrated from version 0 to") {
		t.Fatalf("migrate: %q", r.stdout)
	}
	mustCLI(t, "", "migrate", "--config", path, "--check")
}

// TestPostgresUnknownParameter: a typo in a PostgreSQL URL's parameter
// (shema=) is refused by adaptq, naming it and listing the allowed ones,
// with exit 2, in migrate, enqueue and stats alike; it used to reach the
// server ("unrecognized configuration parameter", exit 1).
func TestPostgresUnknownParameter(t *testing.T) {
	base := pgtest.URL(t)
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	u := base + sep + "queue=orders&shema=jobs"
	for _, args := range [][]string{
		{"migrate", "--url", u},
		{"migrate", "--url", u, "--check"},
		{"enqueue", "--url", u, "x"},
		{"stats", "--url", u},
	} {
		r := cli(t, "", args...)
		if r.code != exitUsage {
			t.Errorf("adaptq %s: exit %d, want %d; stderr %q", args[0], r.code, exitUsage, r.stderr)
			continue
		}
		for _, want := range []string{`unknown parameter "shema"`, "schema", "pool_max_conns", "sslmode", "application_name", "options"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("adaptq %s: stderr %q does not say %q", args[0], r.stderr, want)
			}
		}
	}
}
