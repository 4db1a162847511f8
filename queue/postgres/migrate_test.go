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
	if err != nil || len(ms) != 2 || ms[0].Metadata != nil {
		t.Fatalf("Get = %d, %v; want the 2 live messages, without metadata", len(ms), err)
	}
	// Version 3's metadata column takes a message put after the upgrade.
	md := map[string]string{"tenant": "t1"}
	if _, err := q.Put(ctx, []byte("new"), queue.PutOptions{Metadata: md}); err != nil {
		t.Fatal(err)
	}
	if ms, err := q.Get(ctx, 1, time.Minute); err != nil || len(ms) != 1 || ms[0].Metadata["tenant"] != "t1" {
		t.Fatalf("Get after a put with metadata = %+v, %v", ms, err)
	}
}

// v1Put is version 1's Put statement, as a worker of version 1 still
// running after the migration sends it: its body row has no queue and no
// expiry.
const v1Put = `
WITH m AS (
	INSERT INTO {s}.messages (queue_id, visible_at, expires_at, inserted_at)
	VALUES ($2, {now} + $3::bigint * interval '1 microsecond',
	        CASE WHEN $4::bigint < 0 THEN 'infinity'::timestamptz ELSE {now} + $4::bigint * interval '1 microsecond' END,
	        {now})
	RETURNING id
), b AS (
	INSERT INTO {s}.bodies (id, body) SELECT id, $5 FROM m
), c AS (
	UPDATE {s}.counts SET n = n + 1 WHERE queue_id = $2 AND shard = {shard}
)
SELECT id FROM m`

// TestSweepFindsVersion1WorkersMessages: a worker of version 1 still
// running after another process migrated the schema (a rolling upgrade,
// with migrations applied on open by default) writes bodies without their
// queue and expiry. Once such a message expires it is never returned, so
// nothing deletes it: it stayed in Count, Depth and the table for good.
// The sweep fills in what version 1 left out and deletes it.
func TestSweepFindsVersion1WorkersMessages(t *testing.T) {
	ctx := context.Background()
	c := clock.NewFake(clock.Epoch)
	db, err := Open(ctx, pgtest.URL(t), WithSchema(pgtest.Schema(t)), WithClock(c))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q, err := db.Queue(ctx, "rolling")
	if err != nil {
		t.Fatal(err)
	}
	pq, err := db.queue(ctx, "rolling")
	if err != nil {
		t.Fatal(err)
	}
	sql := strings.NewReplacer("{s}", quoteIdent(db.schema), "{now}", "coalesce($1::timestamptz, now())", "{shard}", shard).Replace(v1Put)
	for _, ttl := range []int64{micros(time.Minute), -1} { // one expires, one never does
		if _, err := db.pool.Exec(ctx, sql, c.Now(), pq.st.id, int64(0), ttl, []byte("v1")); err != nil {
			t.Fatalf("version 1's Put: %v", err)
		}
	}
	c.Advance(2 * time.Minute)
	if n, err := db.Sweep(ctx, "rolling"); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want the expired message version 1 put", n, err)
	}
	if n, err := q.Count(ctx); err != nil || n != 1 {
		t.Fatalf("Count = %d, %v; want 1 (the message without expiry)", n, err)
	}
	ms, err := q.Get(ctx, queue.MaxBatchSize, time.Minute)
	if err != nil || len(ms) != 1 {
		t.Fatalf("Get = %d, %v; want the message without expiry", len(ms), err)
	}
}
