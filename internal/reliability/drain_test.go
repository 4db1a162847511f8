package reliability

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/testutil"
)

// TestSIGTERMDrainsUnderLoad sends SIGTERM to a worker whose handlers take
// longer than the shutdown grace: the process exits soon after the grace
// period, nothing is lost, and the messages it was working on are visible
// to a second consumer at once, not after their one-minute visibility
// timeout.
func TestSIGTERMDrainsUnderLoad(t *testing.T) {
	const (
		n           = 400
		handlerTime = 3 * time.Second
		grace       = time.Second
		vis         = time.Minute
	)
	db, record := paths(t)
	q := openQueue(t, db)
	ids := fill(t, q, n)
	w := startWorker(t, db, record, handlerTime, grace, vis)
	ctx := context.Background()
	// Under load: the first wave is done and the next is being handled.
	deadline := time.Now().Add(testutil.HangGuard)
	for lines(record) < workerConcurrency {
		if time.Now().After(deadline) {
			t.Fatalf("only %d handled", lines(record))
		}
		time.Sleep(5 * time.Millisecond)
	}
	sent := time.Now()
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := w.wait(t, vis); err != nil {
		t.Fatalf("worker exit: %v", err)
	}
	took := time.Since(sent)
	t.Logf("exited %s after SIGTERM (grace %s)", took.Round(time.Millisecond), grace)
	// A loose bound, for a busy machine: a worker that waited for its
	// handlers (3 s) or their messages' visibility timeout (1 m) would not
	// have returned from wait.
	if took > vis/2 {
		t.Errorf("exit took %s, far past the %s grace period", took, grace)
	}

	// A second consumer gets everything not recorded as done, at once.
	done := readRecord(t, record)
	got := map[string]bool{}
	for {
		ms, err := q.Get(ctx, 32, vis)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			break
		}
		for _, m := range ms {
			got[m.ID] = true
		}
	}
	for _, id := range ids {
		if done[id] == 0 && !got[id] {
			t.Fatalf("message %s is neither handled nor visible: lost, or hidden until its visibility timeout", id)
		}
	}
	if depth, _ := q.Count(ctx); depth != len(got) {
		t.Fatalf("depth %d but a second consumer got %d: some are still hidden", depth, len(got))
	}
	t.Logf("%d handled before the drain ended, %d handed back to the next consumer", len(done), len(got))
}
