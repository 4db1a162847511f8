package adaptqtest_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

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

// A worker fault whose pause outlasts the visibility timeout: the kit
// moves its clock timer by timer, so the held message is renewed on the
// way and runs again once, in place, never shown to a task meanwhile.
func TestKitHoldsAWorkerFaultAcrossRenewals(t *testing.T) {
	var runs, now, most atomic.Int32
	h := func(context.Context, *queue.Message) error {
		n := now.Add(1)
		defer now.Add(-1)
		if n > most.Load() {
			most.Store(n)
		}
		if runs.Add(1) == 1 {
			return fmt.Errorf("open /tmp/x: %w", syscall.EMFILE)
		}
		return nil
	}
	k, err := adaptqtest.NewListener("orders", h, listener.Options{VisibilityTimeout: 4 * time.Second,
		ErrorBackoffInitial: 20 * time.Second, ErrorBackoffMax: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	id := k.Put("orders", []byte("o1"))
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	k.RequireHandled(t, id)
	if s := k.Listener("orders").Stats(); runs.Load() != 2 || s.Renewed == 0 || s.Released != 0 || s.LeasesLost != 0 {
		t.Fatalf("stats %+v, %d runs: want the message held (renewed) through the 20 s pause and run again once", s, runs.Load())
	}
	if m := k.Message(id); m.DequeueCount != 1 {
		t.Fatalf("%v: want one delivery", m)
	}
}
