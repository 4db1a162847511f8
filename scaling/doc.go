// Package scaling decides how hard a listener works: how long an idle
// dequeue task sleeps, and how many tasks a queue's depth calls for.
//
// The Best Practices article names the pieces, and they keep their meaning here:
//
//   - The QueueEmpty event's handler (HandleQueueEmptyEvent) computes a
//     randomized exponential delay after each empty get: IdleBackoff.
//     After k empty gets in a row a task sleeps
//     min(minIdle + (2^k − 1)·rand[0.8, 1.2]·delta, maxIdle), and once the
//     delay reaches maxIdle a task may stop if it is not the last one. Idle
//     cost thus falls to one get per maxIdle for the whole listener.
//   - GetOptimalDequeueTaskCount maps a queue depth to a number of tasks: a
//     Policy. StaticRules is the article's table; Proportional is KEDA's rule
//     (one task per so many waiting messages); SLA meets a pickup-latency
//     target by Little's law, from a drain rate per task it learns from
//     the agent's samples (a policy that learns is an Observer).
//   - The QueueWorkDetected event, raised when a task that was idle finds
//     messages, wakes the Agent, which reads the depth and resizes the pool
//     to the policy's answer, then keeps sampling while the queue is busy.
//     Step is one such sample, for callers that drive the agent in virtual
//     time (the simulator, internal/sim).
//   - The article's dynamic scaling agent, across processes: Instances
//     answers how many worker instances a backlog needs, from the drain
//     rate one instance measured, for an autoscaler outside the process
//     (the worker serves it at GET /v1/scaling; configs/keda reads it).
//     DesiredOrZero is the same answer from a scaler that runs no worker
//     (`adaptq scaler`), which may be 0, and BoundedDepth bounds the depth
//     reads of a signal anyone may poll.
//
// The agent grows the pool and trims it while work remains. Shrinking to
// one task when the queue stays empty is the QueueEmpty stop rule's job;
// with ShrinkWhenEmpty the agent also resizes the pool to its minimum the
// moment a sample finds the queue empty, which spares each surplus task the
// empty gets of its backoff. It never grows an empty queue's pool, so the
// two never fight over the same tasks.
package scaling
