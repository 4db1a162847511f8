package sqlite

import (
	"context"
	"database/sql"
)

// checkpointEvery is how many write transactions (Put groups, Gets,
// DeleteBatches) pass between two background checkpoints: about 500 WAL
// frames in a drain of small messages, half SQLite's automatic
// checkpoint (1,000 pages).
const checkpointEvery = 50

// Checkpoints off the writer (issue 34). In WAL mode SQLite checkpoints
// inside the commit that takes the WAL past 1,000 pages (PRAGMA
// wal_autocheckpoint): with synchronous NORMAL that commit flushes the WAL,
// copies its pages into the database file and flushes that, two fsyncs of
// about a millisecond each while the one writer connection waits, every
// 1,600 messages of a drain. A DB therefore runs a checkpoint loop on a
// connection of its own: every checkpointEvery write transactions it runs
// PRAGMA wal_checkpoint(PASSIVE), which copies what the WAL holds beside
// the writer (it never waits for the writer and the writer never waits
// for it), so that when the WAL reaches the automatic checkpoint's size
// little or nothing is left for the writer to copy and flush, and the WAL
// starts over. The automatic checkpoint stays as it is, so the WAL is
// flushed at least as often as before: what a power cut may lose under
// synchronous NORMAL (the commits since the last flush) does not grow.
//
// A checkpoint that fails (another process's, or the vacuum loop's, is
// under way) is skipped: the next one, or the automatic one, catches up.

// committed counts a write transaction and wakes the checkpoint loop every
// checkpointEvery of them.
func (db *DB) committed() {
	if db.ckptKick == nil || db.commits.Add(1)%checkpointEvery != 0 {
		return
	}
	select {
	case db.ckptKick <- struct{}{}:
	default: // a checkpoint is pending already
	}
}

// checkpointLoop runs a passive checkpoint each time committed wakes it,
// until ctx ends.
func (db *DB) checkpointLoop(ctx context.Context, c *sql.DB) {
	defer close(db.ckptDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-db.ckptKick:
		}
		var busy, log, done int
		db.ckptMu.Lock() // not beside the vacuum's TRUNCATE checkpoint
		err := c.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &log, &done)
		db.ckptMu.Unlock()
		if db.ckptHook != nil {
			db.ckptHook(log, done, err)
		}
	}
}
