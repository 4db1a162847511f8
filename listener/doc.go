// Package listener is adaptq's adaptive queue listener: the Best Practices article's
// CloudQueueListenerExtension, made Go. It owns the loop between a queue and
// a handler func: batch gets, parallel dispatch, deletes after success,
// idle backoff, the QueueEmpty and WorkDetected hooks, pool resizing,
// visibility renewal and graceful shutdown.
//
// # The Best Practices article's concepts, by their Go names
//
//   - StartListener(threadCount) is Start(ctx, n); Run(ctx) starts
//     Options.Tasks tasks and returns once everything has shut down.
//   - DequeueTaskMain is a task: it gets up to BatchSize messages (the Best Practices article:
//     never more than 32) hidden for VisibilityTimeout, hands them to the
//     handler, and gets again once no more than NewBatchThreshold of them
//     are still running (Azure Functions' rule), so one slow message holds
//     back nothing but itself.
//   - The QueueEmpty event is Options.QueueEmpty, called after every empty
//     get with the task's count of empty gets in a row; it returns the sleep
//     and whether the task stops. The default is the article's randomized
//     exponential backoff and stop rule (package scaling). The listener
//     never lets stops leave fewer than MinTasks, so the last task keeps
//     polling.
//   - QueueWorkDetected is Options.WorkDetected, fired once when a task
//     that was idle finds messages. Wire it to a scaling.Agent, which reads
//     the depth and calls Resize with GetOptimalDequeueTaskCount's answer.
//   - QueryState is State: the queue's depth (one billed Count) and the
//     pool's active, total and idle tasks, messages in flight and counters.
//   - A push trigger's OnNext is Wake: every sleeping task gets at once,
//     but no sooner than the trigger floor after its last empty get.
//
// Not in the seed: Options.LatencyTarget, the pickup latency the queue
// accepts. Half of it, the cadence, is the trigger floor, idle.min and
// idle.delta when unset, and how long a task waits after a get that found
// the queue drained (fewer messages than asked) before its next get, so
// that at a steady rate a task gets once per cadence. Its default is
// cost-first (200 ms, the seed's 100 ms delta) where the backend bills its
// calls and latency-first (10 ms) where it does not (cadence.go).
//
// Not in the seed either: batch handlers. NewBatch takes a
// handler.BatchFunc, which gets up to Options.BatchMax messages per call,
// filled from several gets for up to Options.BatchWait, and returns one
// outcome per message; each message then settles alone, on the path a
// Func's result takes. Options.Concurrency counts calls (batchcall.go).
//
// # What a handler can rely on
//
// A handler returning nil has its message deleted; the deletes of a batch
// are coalesced into one call where the driver can delete in batches, and
// made on a context that shutdown does not cancel. A handler returning an
// error leaves its message to reappear after the visibility timeout; a
// permanent error (handler.Permanent) hides it for RetryDelay instead of
// letting it come straight back. A panic is recovered and counts as a
// failure. Delivery is at least once: a message can run again after a
// crash, a timeout or a lost delete, so handlers must be idempotent (key on
// Message.ID).
//
// No hide outlives its message: a failed message is hidden at most until a
// get can still find it before its time-to-live ends, and one that cannot
// be retried as a server asked before then is poisoned rather than lost
// (see Options.RetryDelay). A failure for want of the worker's own
// resources (handler.IsWorkerFault) pauses the tasks' gets, and the message
// runs again here, in the same delivery, when the pause ends: it does not
// count towards its poisoning, here or after a restart. The error a
// handler returns is redacted once (queue.RedactError) before the log, the
// poison envelope or RetryDelay sees it.
//
// While a handler runs past half the visibility timeout, its message is
// hidden again for another timeout (UpdateVisibility), and the newest pop
// receipt is carried forward to the next renewal and to the delete. A
// renewal that fails is tried again an eighth of the timeout later (at most
// a second), well before the lease ends; the calls of one renewal pass
// share a deadline of a quarter of the timeout, so a hung backend cannot
// hold the batch.
//
// # Concurrency and cost
//
// Options.Concurrency bounds the messages held by handlers at once. A task
// waits for a whole batch's worth of free slots before it gets, so every
// get asks for a full batch (the fewest billed calls) and no fetched
// message waits for a slot while its visibility timeout runs. Handlers that
// take microseconds run one after another on one goroutine per batch;
// slower ones run in parallel; a batch whose sequential run stalls spills
// its unstarted messages onto parallel runners, settles at once what it
// had finished (their slots free, the task gets again) and hands the
// task's loop to a new goroutine.
//
// # The life of a message
//
// Each fetched message has one state (fetched → running → succeeded or
// settling → done) that only its owner changes, by compare-and-swap: the
// runner that claimed it, the batch delete for succeeded messages, or the
// renewal when it finds the lease lost. Renewal extends only fetched and
// running messages and holds the batch's lock across the call, so a
// message being poisoned, hidden or released always uses its newest
// receipt, and nothing settles a message another path owns. Every message
// is claimed by exactly one runner, which accounts for it exactly once.
// The stall watchdog belongs to its batch. The torture test (make torture)
// drives random schedules against these rules.
//
// Abort cancels the handlers running at that moment; later handlers get
// live contexts. Start may run the listener again after Wait, from clean
// counters.
//
// # Logs
//
// A handler failure whose message stays in the queue is a warn line (an
// error line if permanent) with msg_id, dequeue_count, queue and error, at
// most FailureLogLines per FailureLogInterval per listener; one line counts
// the failures left out. Poisoning is an error line, always; a lease lost
// to the visibility timeout a warn line; expected events (a stale receipt,
// an empty queue) are debug.
//
// # Shutdown
//
// When the run's context ends, tasks stop getting at once, messages fetched
// but not started are released with UpdateVisibility(0) so that another
// worker can take them now, and running handlers have ShutdownGrace to
// finish before their context is cancelled. Run returns when all of it has
// ended: no goroutine outlives the listener.
package listener
