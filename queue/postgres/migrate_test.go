package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// TestMigrateFromVersion1: a schema that version 1 made, holding
// messages, is brought to version 2 on open; its bodies get their queue
// and expiry, so the sweep finds the expired messages put before the
// upgrade, and the live ones are kept.
func TestMigrateFromVersion1(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.Schema(t)
	s := quoteIdent(schema)
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Version 1 as it was: its migration and its Put's rows.
	for _, sql := range []string{
		`CREATE SCHEMA ` + s,
		`CREATE TABLE ` + s + `.adaptq_migrations (version int PRIMARY KEY, description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
		strings.ReplaceAll(migrations[0].sql, "{s}", s),
		`INSERT INTO ` + s + `.adaptq_migrations (version, description) VALUES (1, 'v1')`,
		`INSERT INTO ` + s + `.queues (name) VALUES ('old')`,
		`INSERT INTO ` + s + `.counts (queue_id, shard, n) SELECT id, 0, 3 FROM ` + s + `.queues`,
		`WITH m AS (
			INSERT INTO ` + s + `.messages (queue_id, visible_at, expires_at, inserted_at)
			SELECT q.id, '2026-01-01', e, '2026-01-01' FROM ` + s + `.queues q,
			unnest(ARRAY['2026-01-02', '2026-01-03', 'infinity']::timestamptz[]) e
			RETURNING id
		) INSERT INTO ` + s + `.bodies (id, body) SELECT id, 'b' FROM m`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	c := clock.NewFake(time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)) // the first has expired
	db, err := Open(ctx, pgtest.URL(t), WithSchema(schema), WithClock(c))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var version, missing int
	if err := conn.QueryRow(ctx, `SELECT max(version) FROM `+s+`.adaptq_migrations`).Scan(&version); err != nil || version != SchemaVersion {
		t.Fatalf("schema version %d (%v), want %d", version, err, SchemaVersion)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+s+`.bodies WHERE queue_id IS NULL OR expires_at IS NULL`).Scan(&missing); err != nil || missing != 0 {
		t.Fatalf("%d bodies without their queue or expiry (%v)", missing, err)
	}
	if n, err := db.Sweep(ctx, "old"); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want the one expired message", n, err)
	}
	q, err := db.Queue(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := q.Count(ctx); err != nil || n != 2 {
		t.Fatalf("Count = %d, %v; want 2", n, err)
	}
	ms, err := q.Get(ctx, queue.MaxBatchSize, time.Minute)
	if err != nil || len(ms) != 2 {
		t.Fatalf("Get = %d, %v; want the 2 live messages", len(ms), err)
	}
}
