package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrSchemaTooNew is returned by Open for a file whose schema version is
// newer than this package knows: it was written by a later adaptq, and an
// older one must not guess at its layout.
var ErrSchemaTooNew = errors.New("sqlite: database schema is newer than this build of adaptq")

// ErrNotAdaptq is returned by Open for an SQLite file that belongs to
// another application.
var ErrNotAdaptq = errors.New("sqlite: not an adaptq database")

// applicationID marks the file as adaptq's in the SQLite header ("adtq").
const applicationID = 0x61647471

// migrations are the schema steps, in order: migrations[i] takes the schema
// from version i to i+1. The version of a file is its PRAGMA user_version.
// Append to this list; never edit a released step.
var migrations = []string{
	// Version 1: queues and their messages.
	`CREATE TABLE queues (
		id         INTEGER PRIMARY KEY AUTOINCREMENT,
		name       TEXT    NOT NULL UNIQUE,
		created_at INTEGER NOT NULL
	) STRICT;
	CREATE TABLE messages (
		id            INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused: message ids are idempotency keys
		queue_id      INTEGER NOT NULL REFERENCES queues (id),
		inserted_at   INTEGER NOT NULL,                  -- Unix ns
		visible_at    INTEGER NOT NULL,                  -- Unix ns; hidden while > now
		expires_at    INTEGER NOT NULL,                  -- Unix ns; max int64 for no expiry
		dequeue_count INTEGER NOT NULL DEFAULT 0,
		receipt       INTEGER,                           -- current pop receipt; NULL before the first get
		body          BLOB    NOT NULL
	) STRICT;
	CREATE INDEX messages_ready ON messages (queue_id, visible_at, id, expires_at);`,

	// Version 2: a message's body apart from its changing state, so that a
	// Get or an UpdateVisibility rewrites a small row and never the body;
	// each queue's depth in its queues row, kept by the statements that add
	// and remove messages, in their transaction; an index on expiry, which
	// Count and the purge of expired messages read.
	`CREATE TABLE bodies (
		id   INTEGER PRIMARY KEY, -- messages.id
		body BLOB    NOT NULL
	) STRICT;
	INSERT INTO bodies (id, body) SELECT id, body FROM messages;
	ALTER TABLE messages DROP COLUMN body;
	ALTER TABLE queues ADD COLUMN depth INTEGER NOT NULL DEFAULT 0; -- rows in messages, expired ones included
	UPDATE queues SET depth = (SELECT count(*) FROM messages WHERE queue_id = queues.id);
	CREATE INDEX messages_expiry ON messages (queue_id, expires_at);`,

	// Version 3: a message's metadata (driver.EncodeMetadata's JSON) beside
	// its body; NULL for a message without any, which costs nothing.
	`ALTER TABLE bodies ADD COLUMN meta BLOB;`,

	// Version 4: messages_ready split in two partial indexes, by whether a
	// message was ever got (receipt). A Get moves the messages it takes
	// from the head of messages_ready to messages_held, and a delete
	// removes them from messages_held: messages_ready only loses entries at
	// its head (Gets) and gains them at its tail (Puts), while the held
	// messages, as few as consumers hold, churn in a small index of their
	// own. In one index, a Get's entries landed at the tail (visible_at in
	// the future), beside the last messages put, and the delete took them
	// out again: whenever that last leaf had no room for 32 more, every Get
	// split it and every delete merged it (four leaf pages, a page
	// allocated or freed, the free list and the pointer map written each
	// time; issue 34: 10–12 pages a Get of 32 where 3–5 do).
	`DROP INDEX messages_ready;
	CREATE INDEX messages_ready ON messages (queue_id, visible_at, id, expires_at) WHERE receipt IS NULL;
	CREATE INDEX messages_held ON messages (queue_id, visible_at, id, expires_at) WHERE receipt IS NOT NULL;`,
}

// schemaVersion is the version this build writes and understands.
var schemaVersion = len(migrations)

// migrate brings the schema of the database behind w up to schemaVersion in
// one IMMEDIATE transaction, so that processes opening a new file at once
// migrate it once.
func migrate(ctx context.Context, w *sql.DB) error {
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit

	var appID, version int
	if err := tx.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
		return fmt.Errorf("migrate: read application_id: %w", err)
	}
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("migrate: read user_version: %w", err)
	}
	switch {
	case appID != applicationID && (appID != 0 || version != 0):
		return fmt.Errorf("%w: application_id is %#x and user_version %d (adaptq writes application_id %#x)",
			ErrNotAdaptq, appID, version, applicationID)
	case version > schemaVersion:
		return fmt.Errorf("%w: the file has schema version %d, this build knows up to %d; upgrade adaptq",
			ErrSchemaTooNew, version, schemaVersion)
	case version == schemaVersion:
		return nil
	}
	for v := version; v < schemaVersion; v++ {
		if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
			return fmt.Errorf("migrate: schema version %d to %d: %w", v, v+1, err)
		}
	}
	// PRAGMA arguments cannot be bound; both values are integers of ours.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA application_id = %d; PRAGMA user_version = %d", applicationID, schemaVersion)); err != nil {
		return fmt.Errorf("migrate: set version: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}
