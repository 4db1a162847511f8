package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Space reclaiming. The file is in incremental auto-vacuum mode: the pages
// that deleted messages free go on a free list (puts reuse them), and
// PRAGMA incremental_vacuum(n) gives up to n of them back to the file
// system by moving the last pages of the file into free slots and cutting
// the file. A DB's vacuum loop does this in small steps, each a short write
// transaction of its own, so a drained file shrinks without a
// stop-the-world VACUUM while Puts and Gets go on between the steps.
const (
	// vacuumInterval is how often the loop looks at the file's free list.
	vacuumInterval = time.Second
	// vacuumMinFree is the number of free pages (of 4 KiB) below which a
	// file is left alone (256 KiB): a step costs a transaction and a
	// checkpoint, not worth it for less.
	vacuumMinFree = 64
	// vacuumStep is the number of pages one step gives back (8 MiB): a
	// transaction of milliseconds when the end of the file is free.
	vacuumStep = 2048
	// vacuumStepsPerTick bounds the steps of one tick: up to 64 MiB a
	// second, so a drained file of a few hundred MiB is back to its
	// minimum within seconds.
	vacuumStepsPerTick = 8
)

// vacuumWorthIt says whether a file of pages pages, free of them free, is
// worth shrinking: at least vacuumMinFree free pages, and nine tenths of
// the file free, or half of it while nothing has been written since the
// last tick (busy is false). A step moves the pages in use at the end of
// the file into free slots: while a queue is being drained those are
// messages about to be deleted, and moving them is wasted writing, so a
// busy file waits until little is left to move (a tenth at most); a quiet
// one gives back once half of it is free. A queue busy at its usual depth
// is left alone: its free pages are reused by the next puts.
func vacuumWorthIt(pages, free int64, busy bool) bool {
	if free < vacuumMinFree {
		return false
	}
	return 10*free >= 9*pages || (!busy && 2*free >= pages)
}

// incrementalVacuum puts a file that is not in incremental auto-vacuum mode
// into it: a file written by schema version 1 (or any file made before the
// DSN asked for the mode) needs one full VACUUM to change mode, once, when
// it is first opened; it holds the write lock meanwhile (seconds for a file
// of hundreds of MiB), so another process opening the file at that moment
// may see a transient busy error. A new file is born in the mode (the
// writer's DSN sets it), so this is a no-op for it.
func incrementalVacuum(ctx context.Context, w *sql.DB) error {
	var mode int
	if err := w.QueryRowContext(ctx, "PRAGMA auto_vacuum").Scan(&mode); err != nil {
		return fmt.Errorf("read auto_vacuum: %w", err)
	}
	const incremental = 2
	if mode == incremental {
		return nil
	}
	if _, err := w.ExecContext(ctx, "PRAGMA auto_vacuum = INCREMENTAL"); err != nil {
		return fmt.Errorf("set auto_vacuum: %w", err)
	}
	// VACUUM copies the database into a temporary one: in a file, not in
	// memory (the connection's temp_store), as an old file may be large.
	// w has one connection, and nothing else uses it while Open runs.
	if _, err := w.ExecContext(ctx, "PRAGMA temp_store = FILE"); err != nil {
		return fmt.Errorf("vacuum: temp_store: %w", err)
	}
	_, verr := w.ExecContext(ctx, "VACUUM")
	if _, err := w.ExecContext(ctx, "PRAGMA temp_store = MEMORY"); err != nil {
		return fmt.Errorf("vacuum: temp_store: %w", err)
	}
	if verr != nil {
		return fmt.Errorf("vacuum into incremental auto-vacuum mode: %w", verr)
	}
	return nil
}

// vacuumLoop runs vacuum every vacuumInterval until ctx ends.
func (db *DB) vacuumLoop(ctx context.Context) {
	defer close(db.vacuumDone)
	t := time.NewTicker(vacuumInterval)
	defer t.Stop()
	var last activity
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			now, err := db.activity(ctx)
			if err != nil {
				continue
			}
			busy := now != last
			last = now
			_, _ = db.vacuum(ctx, busy) // a failure (the file busy) is retried at the next tick
		}
	}
}

// activity tells whether the file was written between two readings: the
// rows this process's writer changed (total_changes()) and the commits of
// other connections (PRAGMA data_version, which other processes' commits
// change). The vacuum's own steps change neither.
type activity struct{ changes, dataVersion int64 }

func (db *DB) activity(ctx context.Context) (activity, error) {
	var a activity
	if err := db.w.QueryRowContext(ctx, "SELECT total_changes()").Scan(&a.changes); err != nil {
		return a, err
	}
	err := db.w.QueryRowContext(ctx, "PRAGMA data_version").Scan(&a.dataVersion)
	return a, err
}

// vacuum gives free pages back while vacuumWorthIt, in up to
// vacuumStepsPerTick steps, then checkpoints so that the database file is
// cut at once (in WAL mode the file shrinks when the checkpoint copies the
// commit that shrank it). It returns the number of pages given back.
func (db *DB) vacuum(ctx context.Context, busy bool) (int64, error) {
	var released int64
	for range vacuumStepsPerTick {
		var pages, free int64
		if err := db.w.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
			return released, err
		}
		if err := db.w.QueryRowContext(ctx, "PRAGMA freelist_count").Scan(&free); err != nil {
			return released, err
		}
		if !vacuumWorthIt(pages, free, busy) {
			break
		}
		n := min(free, vacuumStep)
		if _, err := db.w.ExecContext(ctx, fmt.Sprintf("PRAGMA incremental_vacuum(%d)", n)); err != nil {
			return released, err
		}
		released += n
	}
	if released > 0 {
		return released, db.truncateWAL(ctx)
	}
	return released, nil
}

// checkpointWait bounds how long the checkpoint after a vacuum waits for
// readers and another process's writer: it is tidying, and must not hold
// the writer connection for the busy timeout.
const checkpointWait = 100 * time.Millisecond

// truncateWAL checkpoints the whole WAL and cuts it to zero bytes, which
// also cuts the database file to the size the vacuum left. If readers or
// another process's writer keep it waiting beyond checkpointWait, it gives
// up; the WAL then shrinks at a later checkpoint (journal_size_limit).
func (db *DB) truncateWAL(ctx context.Context) error {
	c, err := db.w.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var busyMillis int64
	if err := c.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busyMillis); err != nil {
		return err
	}
	if _, err := c.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", checkpointWait.Milliseconds())); err != nil {
		return err
	}
	// The checkpoint loop's passive checkpoint, if one is under way, would
	// make SQLite answer busy at once (one checkpoint at a time, no busy
	// handler for that) and this one would do nothing: wait for it.
	db.ckptMu.Lock()
	_, cerr := c.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	db.ckptMu.Unlock()
	if _, err := c.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf("PRAGMA busy_timeout = %d", busyMillis)); err != nil {
		return err
	}
	return cerr
}
