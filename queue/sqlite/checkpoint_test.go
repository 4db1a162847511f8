package sqlite

import (
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
