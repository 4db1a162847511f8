package adaptqtest_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/adaptq/adaptq/adaptqtest"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
)

// A handler that meets a worker fault (too many open files) once: the
// listener holds the message through the gets' pause and runs it again in
// place when the pause ends. The kit must see the held message and the
// pausing tasks as waiting for its clock, and move it, rather than wait in
// real time for a worker that waits for virtual time.
func TestKitSettlesAWorkerFault(t *testing.T) {
	var runs atomic.Int32
	h := func(context.Context, *queue.Message) error {
		if runs.Add(1) == 1 {
			return fmt.Errorf("open /tmp/x: %w", syscall.EMFILE)
		}
		return nil
	}
	k, err := adaptqtest.NewListener("orders", h, listener.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	id := k.Put("orders", []byte("o1"))
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	k.RequireHandled(t, id)
	if s := k.Listener("orders").Stats(); s.WorkerFaults != 1 || s.Processed != 1 || runs.Load() != 2 {
		t.Fatalf("stats %+v, %d runs: want one worker fault, then the run in place that succeeded", s, runs.Load())
	}
}
