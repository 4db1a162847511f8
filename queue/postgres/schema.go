package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/adaptq/adaptq/queue"
)

// SchemaVersion is the newest schema this package writes and reads.
const SchemaVersion = 3

// ErrSchemaTooNew: the database schema was written by a newer version of
// this package; upgrade the program rather than run it against a schema it
// does not know.
var ErrSchemaTooNew = errors.New("postgres: schema is newer than this program")

// ErrSchemaOutdated: the schema needs migrations and the URL said
// migrate=false (run `adaptq migrate` first).
var ErrSchemaOutdated = errors.New("postgres: schema is not migrated (run `adaptq migrate`)")

// countShards is the number of rows each queue's counter is spread over.
// Every Put adds 1 to one row and every delete subtracts from one, in the
// same statement as the change it counts; a connection always uses the row
// of its backend pid modulo countShards, so concurrent connections rarely
// wait on the same row lock. Count sums 32 rows (16 more for callers' transactions, see txShard): O(1) at any depth.
const countShards = 16

// migration is one step of the schema. Steps run in order, each once, in
// one transaction per Migrate call, under an advisory lock so that
// processes opening the same schema at once do not race.
type migration struct {
	version     int
	description string
	sql         string // {s} is the quoted schema
}

// Autovacuum: messages, bodies and counts churn, every Get and delete
// leaving a dead tuple, so the default trigger (20 % of the table dead)
// would let a million-row queue carry 200,000 dead rows that every Get's
// index scan steps over. A fixed threshold with no scale factor vacuums
// after every few thousand dead rows whatever the size, with no cost delay
// so the vacuum keeps up with the workers. The insert threshold does the
// same for a queue that is only filled (it sets the visibility map).
const autovacuumChurn = `autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
	  autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 20000,
	  autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0`

var migrations = []migration{
	{1, "queues, messages (state) and bodies apart, sharded counters", `
CREATE TABLE {s}.queues (
	id         int GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	name       text NOT NULL UNIQUE,
	created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE {s}.messages (
	id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	queue_id      int NOT NULL,
	visible_at    timestamptz NOT NULL,
	expires_at    timestamptz NOT NULL,
	inserted_at   timestamptz NOT NULL,
	dequeue_count int NOT NULL DEFAULT 0,
	receipt       bigint
) WITH (` + autovacuumChurn + `);
CREATE INDEX messages_ready ON {s}.messages (queue_id, visible_at, id);
CREATE TABLE {s}.bodies (
	id   bigint PRIMARY KEY,
	body bytea NOT NULL
) WITH (` + autovacuumChurn + `);
CREATE TABLE {s}.counts (
	queue_id int NOT NULL,
	shard    int NOT NULL,
	n        bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (queue_id, shard)
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
	  autovacuum_vacuum_cost_delay = 0);
`},
	{2, "bodies carry their queue and expiry, indexed: expired messages are found without a scan", `
ALTER TABLE {s}.bodies ADD COLUMN queue_id int, ADD COLUMN expires_at timestamptz;
UPDATE {s}.bodies b SET queue_id = m.queue_id, expires_at = m.expires_at
FROM {s}.messages m WHERE m.id = b.id;
CREATE INDEX bodies_expiry ON {s}.bodies (queue_id, expires_at);
`},
	{3, "a message's metadata beside its body, NULL for none", `
ALTER TABLE {s}.bodies ADD COLUMN meta jsonb;
`},
}

// migrationLockKey is the advisory lock Migrate holds: "adtq" in ASCII,
// mixed with the schema's name by hashtext in SQL.
const migrationLockKey = 0x61647471

// migrate brings schema up to SchemaVersion (apply) or only reports its
// version (apply false). It returns the version before and after.
func migrate(ctx context.Context, conn *pgx.Conn, schema string, apply bool) (before, after int, err error) {
	s := quoteIdent(schema)
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, migrationLockKey, schema); err != nil {
		return 0, 0, err
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = 'adaptq_migrations')`, schema).Scan(&exists); err != nil {
		return 0, 0, err
	}
	if exists {
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+s+`.adaptq_migrations`).Scan(&before); err != nil {
			return 0, 0, err
		}
	}
	if before > SchemaVersion {
		return before, before, fmt.Errorf("%w: schema %q is at version %d, this program knows up to %d", ErrSchemaTooNew, schema, before, SchemaVersion)
	}
	if before == SchemaVersion || !apply {
		return before, before, nil
	}
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+s); err != nil {
		return 0, 0, err
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s+`.adaptq_migrations (
	version     int PRIMARY KEY,
	description text NOT NULL,
	applied_at  timestamptz NOT NULL DEFAULT now())`); err != nil {
		return 0, 0, err
	}
	for _, m := range migrations {
		if m.version <= before {
			continue
		}
		if _, err := tx.Exec(ctx, strings.ReplaceAll(m.sql, "{s}", s)); err != nil {
			return 0, 0, fmt.Errorf("migration %d (%s): %w", m.version, m.description, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+s+`.adaptq_migrations (version, description) VALUES ($1, $2)`, m.version, m.description); err != nil {
			return 0, 0, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, 0, err
	}
	return before, SchemaVersion, nil
}

// Migrate brings the adaptq schema of the database at connString up to
// SchemaVersion, creating the schema if needed, and returns the versions
// before and after: what `adaptq migrate` runs for teams that migrate
// apart from deploying workers (their URLs then say migrate=false).
// Running it again is a no-op.
func Migrate(ctx context.Context, connString, schema string) (before, after int, err error) {
	if schema == "" {
		schema = DefaultSchema
	}
	if err := validSchema(schema); err != nil {
		return 0, 0, err
	}
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return 0, 0, fmt.Errorf("postgres: migrate: %w", err)
	}
	defer conn.Close(context.Background())
	before, after, err = migrate(ctx, conn, schema, true)
	if err != nil {
		return before, after, fmt.Errorf("postgres: migrate schema %q: %w", schema, err)
	}
	return before, after, nil
}

// quoteIdent quotes an SQL identifier.
func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

// validSchema accepts lower-case SQL identifiers short enough to name the
// notification channel ("adaptq:" + schema, at most 63 bytes).
func validSchema(s string) error {
	if s == "" || len(s) > maxSchemaLen {
		return fmt.Errorf("postgres: schema %q: want 1 to %d characters", s, maxSchemaLen)
	}
	for i, c := range s {
		ok := c == '_' || (c >= 'a' && c <= 'z') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return fmt.Errorf("postgres: schema %q: want lower-case letters, digits and _, not starting with a digit", s)
		}
	}
	if strings.HasPrefix(s, "pg_") {
		return fmt.Errorf("postgres: schema %q: names starting with pg_ are reserved", s)
	}
	return nil
}

const maxSchemaLen = 48

// MigrateURL is Migrate for a postgres:// queue URL (its queue and other
// adaptq parameters are allowed and ignored, but schema). With apply false
// it only reads the schema's version: before == after, and after <
// SchemaVersion means migrations are pending. It returns the schema it
// worked on.
func MigrateURL(ctx context.Context, rawURL string, apply bool) (schema string, before, after int, err error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != Scheme && u.Scheme != SchemeAlt) {
		return "", 0, 0, fmt.Errorf("postgres: migrate %q: %w: want postgres://USER@HOST:PORT/DB", queue.Redact(rawURL), queue.ErrInvalidURL)
	}
	if err := checkParams(u); err != nil {
		return "", 0, 0, fmt.Errorf("postgres: migrate: %w", err)
	}
	params := u.Query()
	schema = params.Get(ParamSchema)
	if schema == "" {
		schema = DefaultSchema
	}
	if err := validSchema(schema); err != nil {
		return "", 0, 0, fmt.Errorf("%w: %v", queue.ErrInvalidURL, err)
	}
	for _, p := range adaptqParams {
		params.Del(p)
	}
	c := *u
	c.Scheme = Scheme
	c.RawQuery = pgxQuery(params)
	// Parsed as Open parses it: pgxpool takes its pool_ parameters out of
	// the connection's, which would otherwise reach the server as run-time
	// settings it does not know.
	cfg, err := pgxpool.ParseConfig(c.String())
	if err != nil {
		return schema, 0, 0, fmt.Errorf("postgres: migrate %q: %w: %v", queue.Redact(rawURL), queue.ErrInvalidURL, err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		return schema, 0, 0, fmt.Errorf("postgres: migrate: %w", err)
	}
	defer conn.Close(context.Background())
	before, after, err = migrate(ctx, conn, schema, apply)
	if err != nil {
		return schema, before, after, fmt.Errorf("postgres: migrate schema %q: %w", schema, err)
	}
	return schema, before, after, nil
}
