package reliability

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/testutil"
)

// TestSIGKILLLosesNothing kills a worker with SIGKILL in the middle of
// 10,000 messages, starts another, and checks the handler's record: every
// message handled at least once, the queue empty, and no more duplicates
// than the messages the killed worker could have had in flight.
func TestSIGKILLLosesNothing(t *testing.T) {
	const n = 10_000
	const vis = 2 * time.Second // the killed worker's messages come back after this
	db, record := paths(t)
	q := openQueue(t, db)
	ids := fill(t, q, n)

	w1 := startWorker(t, db, record, 0, 5*time.Second, vis)
	deadline := time.Now().Add(testutil.HangGuard)
	for lines(record) < n/3 {
		if time.Now().After(deadline) {
			t.Fatalf("the worker handled only %d messages", lines(record))
		}
		time.Sleep(time.Millisecond)
	}
	if err := w1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = w1.wait(t, testutil.HangGuard)
	atKill := lines(record)
	if atKill >= n {
		t.Fatalf("the worker finished all %d before the kill; nothing was tested", n)
	}

	w2 := startWorker(t, db, record, 0, 5*time.Second, vis)
	deadline = time.Now().Add(testutil.HangGuard)
	ctx := context.Background()
	for {
		depth, err := q.Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if depth == 0 && len(readRecord(t, record)) == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart: depth %d, %d of %d handled", depth, len(readRecord(t, record)), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := w2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := w2.wait(t, testutil.HangGuard); err != nil {
		t.Fatalf("the second worker's exit: %v", err)
	}

	seen := readRecord(t, record)
	lost, dups := 0, 0
	for _, id := range ids {
		switch c := seen[id]; {
		case c == 0:
			lost++
		case c > 1:
			dups += c - 1
		}
	}
	// In flight at the kill: at most every task's batch and the next one it
	// fetched at the new-batch threshold, all handled but not yet deleted.
	maxInFlight := workerMaxTasks * (workerBatch + workerBatch/2)
	t.Logf("killed after %d handled; %d lost, %d duplicates (bound %d)", atKill, lost, dups, maxInFlight)
	if lost != 0 {
		t.Fatalf("%d messages lost", lost)
	}
	if dups > maxInFlight {
		t.Fatalf("%d duplicates, more than the %d messages that can be in flight", dups, maxInFlight)
	}
	if len(seen) != n {
		t.Fatalf("record holds %d ids, want %d", len(seen), n)
	}
}
