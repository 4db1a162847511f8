package sqlite

import (
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
)

// TestCheckpointsOffTheWriter: with the writer's automatic checkpoint off,
// write transactions alone get the WAL copied into the database file, by
// the checkpoint loop's own connection, so that the writer does not wait
// for a checkpoint's two fsyncs (issue 34). Without the loop nothing
// copied the WAL until the automatic checkpoint, in the writer's commit.
func TestCheckpointsOffTheWriter(t *testing.T) {
	db, _, path := newDB(t)
	type result struct {
		log, done int
		err       error
	}
	ran := make(chan result, 16)
	db.ckptHook = func(log, done int, err error) {
		select {
		case ran <- result{log, done, err}:
		default:
		}
	}
	if _, err := db.w.Exec("PRAGMA wal_autocheckpoint = 0"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	size0 := fi.Size()
	q := mustQueue(t, db, "ckpt")
	for range checkpointEvery {
		mustPut(t, q, string(make([]byte, 4000)), queue.PutOptions{})
	}
	var r result
	select {
	case r = <-ran:
	case <-time.After(10 * time.Second): // a bound on a hang, not a timing
		t.Fatalf("no checkpoint after %d write transactions", checkpointEvery)
	}
	if r.err != nil || r.log == 0 || r.done != r.log {
		t.Fatalf("checkpoint: %d of %d frames copied, %v; want all", r.done, r.log, r.err)
	}
	if fi, err = os.Stat(path); err != nil {
		t.Fatal(err)
	}
	if fi.Size() < size0+checkpointEvery*4000 {
		t.Errorf("database file %d bytes after the checkpoint, %d before: the puts' pages were not copied", fi.Size(), size0)
	}
}

// TestAutomaticCheckpointKept: the writer keeps SQLite's automatic
// checkpoint of 1,000 pages, which bounds what a power cut can lose under
// synchronous NORMAL (the package doc's promise); the checkpoint loop only
// runs checkpoints earlier.
func TestAutomaticCheckpointKept(t *testing.T) {
	db, _, _ := newDB(t)
	var n int
	if err := db.w.QueryRow("PRAGMA wal_autocheckpoint").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1000 {
		t.Errorf("the writer's wal_autocheckpoint is %d, want 1000", n)
	}
}

// TestCheckpointConnectionTakesNoWriteLock: the checkpoint loop's
// connection opens, and checkpoints, while another connection (another
// process) holds the write lock. Its DSN asked for auto_vacuum, whose
// PRAGMA is a write transaction: opening waited the busy timeout for the
// other writer (so Close, which waits for the loop, waited too) and then
// failed with SQLITE_BUSY; it also took the write lock from our own
// writer once per DB.
func TestCheckpointConnectionTakesNoWriteLock(t *testing.T) {
	db, _, path := newDB(t, WithBusyTimeout(time.Millisecond))
	q := mustQueue(t, db, "ckpt")
	mustPut(t, q, "x", queue.PutOptions{})
	other, err := sql.Open("sqlite", dsn(path, "0", SyncNormal, false))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.Begin() // BEGIN IMMEDIATE: the write lock
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("UPDATE queues SET name = name"); err != nil {
		t.Fatal(err)
	}
	if err := db.ckpt.Ping(); err != nil {
		t.Fatalf("the checkpoint connection could not open beside another writer: %v", err)
	}
	var busy, log, done int
	if err := db.ckpt.QueryRow("PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &log, &done); err != nil || busy != 0 {
		t.Fatalf("passive checkpoint beside another writer: busy %d, %v", busy, err)
	}
}

// TestVacuumCheckpointNotSkippedBesideTheLoop: the vacuum's TRUNCATE
// checkpoint, which cuts the database file to what the vacuum left, runs
// while the checkpoint loop's passive checkpoint may be under way (the
// last commits of a drain wake it). SQLite then answers the TRUNCATE at
// once with busy = 1 and no error, and nothing cut the file until later
// writes woke the loop again: a drained file kept its size. Each round
// here wakes the loop on a WAL of some hundred pages and truncates at
// once; the WAL must be empty after every truncate.
func TestVacuumCheckpointNotSkippedBesideTheLoop(t *testing.T) {
	db, _, path := newDB(t)
	db.stopVacuum() // this test runs the truncate itself
	<-db.vacuumDone
	ran := make(chan struct{}, 1)
	db.ckptHook = func(int, int, error) { ran <- struct{}{} }
	if _, err := db.w.Exec("PRAGMA wal_autocheckpoint = 0"); err != nil {
		t.Fatal(err)
	}
	q := mustQueue(t, db, "ckpt")
	body := string(make([]byte, 32<<10))
	for round := range 20 {
		db.commits.Store(0)
		for range checkpointEvery { // the last Put wakes the loop
			mustPut(t, q, body, queue.PutOptions{})
		}
		if err := db.truncateWAL(ctx); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			t.Fatal(err)
		}
		<-ran
		if fi.Size() != 0 {
			t.Fatalf("round %d: the WAL holds %d bytes after the vacuum's TRUNCATE checkpoint", round, fi.Size())
		}
	}
}
