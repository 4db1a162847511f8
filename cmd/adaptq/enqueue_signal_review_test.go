package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
)

// TestEnqueueInterruptedReportsWhatWasWritten: enqueue took no signals,
// so Ctrl-C killed it mid-run with no word of what it had written. An
// interrupt now stops the sending of new batches (those in flight end as
// they would), and enqueue reports what was written, exit 1. Here the
// signal is there before the first batch: nothing is sent.
func TestEnqueueInterruptedReportsWhatWasWritten(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	u := "sqlite://" + dir + "/q.db?queue=orders"
	sigs := make(chan os.Signal, 1)
	sigs <- os.Interrupt
	var out, errOut testutil.SyncBuffer
	e := env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut,
		signals: func() (<-chan os.Signal, func()) { return sigs, func() {} }}
	code := runContext(context.Background(), e, []string{"enqueue", "--url", u, "--count", "3000", "p"})
	n := queueDepthOf(t, u)
	if code != exitFailure {
		t.Fatalf("exit %d (stdout %q, stderr %q), want %d; the queue holds %d", code, out.String(), errOut.String(), exitFailure, n)
	}
	if n != 0 || !strings.Contains(errOut.String(), "0 of 3000 written") || !strings.Contains(errOut.String(), "interrupt") {
		t.Errorf("stderr %q; the queue holds %d, want 0 and a report saying so", errOut.String(), n)
	}
}

// haltDuringBatch is a driver whose first batch sets halt (a signal while
// it is in flight) before it stores its messages.
type haltDuringBatch struct {
	driver.Queue
	pb   driver.PutBatcher
	halt *atomic.Bool
}

func (h *haltDuringBatch) PutBatch(ctx context.Context, reqs []driver.PutRequest) ([]string, []error, error) {
	h.halt.Store(true)
	return h.pb.PutBatch(ctx, reqs)
}

// A signal while batches are in flight lets them end: the report counts
// what they wrote, and says the rest was not sent.
func TestEnqueueInterruptLetsBatchesInFlightEnd(t *testing.T) {
	t.Parallel()
	store := memory.NewStore(memory.WithMaxBatch(4))
	var halt atomic.Bool
	q, err := store.Queue("orders", queue.WithWrapper(func(d driver.Queue) driver.Queue {
		return &haltDuringBatch{Queue: d, pb: d.(driver.PutBatcher), halt: &halt}
	}))
	if err != nil {
		t.Fatal(err)
	}
	var done atomic.Int64
	out, err := putAll(context.Background(), q, [][]byte{[]byte("m")}, 1000, queue.PutOptions{}, &done, &halt)
	if !errors.Is(err, errInterrupted) {
		t.Fatalf("putAll error %v, want errInterrupted", err)
	}
	n, cerr := q.Count(context.Background())
	if cerr != nil {
		t.Fatal(cerr)
	}
	if n == 0 || out.written != n || out.unsent != 1000-n || len(out.failed) != 0 {
		t.Fatalf("outcome %+v; the queue holds %d", out, n)
	}
	if want := fmt.Sprintf("%d of 1000 written; %d not sent", n, 1000-n); out.describe() != want {
		t.Errorf("describe() = %q, want %q", out.describe(), want)
	}
}
