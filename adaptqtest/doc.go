// Package adaptqtest is adaptq's test kit: it runs a worker, or one
// listener, in process on memory queues with a virtual clock the test
// controls, so that a test of a handler, of a worker's config or of a
// producer runs in a millisecond or so, with no backend and no sleep.
//
// NewListener runs a handler on one queue; NewWorker runs an
// adaptq.Worker from a config, the same YAML file production uses, loaded
// with LoadConfig, which swaps each queue's URL for a memory queue, so a
// mistake in the file fails the test as it would fail the worker. Put
// messages (or hand Queue's handle to the producer under test), then:
//
//   - Settle runs the worker until every message is deleted, poisoned or
//     expired. While no message can be got (all hidden by a visibility
//     timeout, a retry delay, Retry-After) the clock jumps to when the
//     first shows again, so a one-hour backoff or a 7-day time-to-live
//     takes a millisecond, not an hour or a week.
//   - Advance moves the clock exactly so far, the worker acting on the way.
//   - Message tells what happened to a message: its state (visible,
//     hidden, deleted, poisoned, expired), each run of the handler with its
//     virtual time, dequeue count and error, and a poisoning's rule and
//     reason. RequireHandled and RequirePoisoned report with t.Errorf,
//     showing the message's id, dequeue count and last error.
//   - LoseDeletes loses deletes after success, as a crash between handler
//     and delete does, so the message runs again: a handler that is not
//     idempotent shows it.
//
// The clock moves only between handler runs: handlers run in real time,
// and the kit waits for them (up to HangGuard) before it moves the clock.
// A handler must not wait for the kit's clock. Pickup latency is not
// modelled: an idle task is woken when a hidden message shows, not up to
// idle.max later. A worker's scaling agent reads the depth as it runs, so
// how far a pool grows is not deterministic; what happens to each message
// is.
//
// A test of "a failing message is poisoned after max_dequeue_count":
//
//	func TestBadSKUIsPoisoned(t *testing.T) {
//		k, err := adaptqtest.NewListener("orders", handleOrder, listener.Options{MaxDequeueCount: 3})
//		if err != nil {
//			t.Fatal(err)
//		}
//		defer k.Close()
//		id := k.Put("orders", []byte(`{"sku":"nope"}`))
//		if err := k.Settle(); err != nil {
//			t.Fatal(err)
//		}
//		k.RequirePoisoned(t, id, poison.RuleMaxDequeue)
//	}
//
// The kit imports the memory driver and no other: a test binary that uses
// it compiles no network backend.
package adaptqtest
