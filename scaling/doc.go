// Package scaling decides how hard a listener works: how long an idle
// dequeue task sleeps, and how many tasks a queue's depth calls for.
//
// Seed 002 names the pieces, and they keep their meaning here:
//
//   - The QueueEmpty event's handler (HandleQueueEmptyEvent) computes a
//     randomized exponential delay after each empty get: IdleBackoff.
//     After k empty gets in a row a task sleeps
//     min(minIdle + (2^k − 1)·rand[0.8, 1.2]·delta, maxIdle), and once the
//     delay reaches maxIdle a task may stop if it is not the last one. Idle
//     cost thus falls to one get per maxIdle for the whole listener.
//   - GetOptimalDequeueTaskCount maps a queue depth to a number of tasks: a
//     Policy. StaticRules is the seed's table; Proportional is KEDA's rule
//     (one task per so many waiting messages).
//   - The QueueWorkDetected event, raised when a task that was idle finds
//     messages, wakes the Agent, which reads the depth and resizes the pool
//     to the policy's answer, then keeps sampling while the queue is busy.
//
// The agent only grows the pool and trims it while work remains; shrinking
// to one task when the queue stays empty is the QueueEmpty stop rule's job,
// so the two never fight over the same tasks.
package scaling
