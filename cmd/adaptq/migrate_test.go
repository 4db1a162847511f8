package main

import (
	"context"
	"errors"
	"strings"
	"testing"

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
