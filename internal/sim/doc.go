// Package sim is adaptq's cost simulator: it runs listener policies against
// the memory driver in virtual time, so that a simulated day takes seconds,
// and reports for each policy the billed calls (by kind, and the idle ones:
// gets that found nothing), their cost per month, the pickup latency from
// put to handler start (p50, p99) and the largest backlog. `adaptq
// simulate` is Main.
//
// # The model
//
// A discrete-event simulation on one goroutine: events (arrivals, a task's
// wake-up, a batch's handlers finishing, an agent sample) run in time
// order, ties in the order they were scheduled, so a run is a pure
// function of its workload, policies and options. The event queue is the
// clock; no goroutine sleeps and nothing waits on a quiescence oracle.
// Wherever a piece of adaptq decides something, the simulation calls the
// real piece:
//
//   - every call goes to the real memory driver (queue/memory: gets of up
//     to 32 with visibility timeouts and pop receipts, deletes, counts) on
//     the virtual clock, through the real cost meter (queue/meter), which
//     counts and prices it; the producer's puts go through a second meter,
//     since they are the same for every policy;
//   - an idle task's sleep is scaling.IdleBackoff.DelayWith with a jitter
//     drawn from a generator seeded per run and policy, and its stop is
//     IdleBackoff.ShouldStop, refused below MinTasks as the listener does;
//   - pool sizes come from the real policies (scaling.SeedRules, SLA,
//     Proportional through SLA's fallback), applied by the real
//     scaling.Agent: the simulator calls Agent.Step where Agent.Run would,
//     at once on WorkDetected and every sample interval while the queue
//     holds messages, and Step reads the depth with a billed Count;
//   - a task's loop is the listener's (listener/task.go): take a stop
//     request if Resize left one, wait while more than NewBatchThreshold
//     of its messages are in flight, take handler slots, get, then
//     dispatch the batch or ask QueueEmpty and sleep; a trigger (Wake) or a
//     resize ends a sleep early; WorkDetected fires once per idle→busy
//     edge.
//
// # What it leaves out
//
// The numbers are the model's, and these are its limits:
//
//   - Calls take no time. A poller's cycle is exactly its sleep, so a 1 s
//     poller polls 3,600 times an hour, as the Best Practices article's arithmetic assumes;
//     a triggered pickup shows a latency of 0.
//   - A handler takes Options.Service for every message, never fails and
//     never outlives the visibility timeout: no retries, poison queue or
//     visibility renewal. The listener's inline dispatch of fast handlers
//     is not modelled; a batch's messages run in parallel.
//   - Handlers do not compete for CPU: each task runs its whole batch at
//     once, as the Best Practices article's PLINQ ForAll does on enough cores, unless
//     Options.Concurrency bounds the handlers across the pool (as the
//     listener's Concurrency does; a task takes a batch's slots before it
//     gets). More tasks therefore always mean more throughput.
//   - One listener on one queue on one instance: no competing consumers,
//     no role instances, no throttling (the Best Practices article's 500 transactions a
//     second per queue, HTTP 503), no transient errors, no lost triggers.
//   - Deletes: by default every message's delete is its own billed call,
//     as on Azure, and as the Best Practices article's cost model counts ("a successful
//     operation to remove a message from the queue will require two
//     repository transactions"). Options.BatchDelete prices a backend that
//     deletes a batch in one call; only policies that coalesce deletes
//     (adaptq's listener) use it. The loops of the two source articles delete one by one.
//   - Arrivals are deterministic: a burst arrives at one instant, a rate
//     is evenly spaced. With a trigger, every put notifies (Worker.Put
//     does), and the notification arrives at once. Messages never expire.
//   - The Best Practices article's adaptive listener sizes the pool once per WorkDetected;
//     the simulator uses adaptq's agent, which also re-samples every 5 s
//     while the queue is busy (one billed Count each, as the article's
//     QueryState makes).
//   - The SLA policy learns its drain rate from the agent's 5 s samples:
//     from intervals in which the pool was busy throughout and, as a lower
//     bound, from one in which it emptied the queue. Before it knows any,
//     its fallback (one task per 32 waiting) sizes the pool, so the first
//     burst of a run gets the maximum.
//   - A run covers [0, its workload's length): an event due exactly at the
//     end (a batch finishing, a poll) is not simulated.
//
// # The Best Practices article's figures
//
// The Best Practices article prices a poller that sleeps 1 s between empty gets: "each
// individual deletion stream performs up to 79,200 transactions (22 hours
// * 60 minutes * 60 transactions per minute)", "approximately $2.38" a
// month at $0.01 per 10,000 (79,200 / 10,000 × $0.01 × 30 days = $2.376).
// The simulator reproduces both exactly: IdleDay with the naive-1 policy
// makes 79,200 calls and costs $2.376 a month. For 200 threads the article
// prints "$457.2", but its own formula gives 200 × $2.376 = $475.20: the
// seed transposed two digits (and its translator's "$45.7", for a tenth
// of the price, repeats the slip). The simulator's 200 pollers cost
// $475.20, and its tests assert that figure, not the misprint.
//
// # Workloads
//
// SeedScenario is the Best Practices article's billing system: an eight-hour workday busy
// 25% of the time, in each hour of which one package of 2,000 to 200,000
// transactions (log-uniform, drawn from a seed) arrives over 15 minutes,
// then 16 hours with no traffic. ParseWorkload reads other days from YAML
// phases, each a duration with a rate and/or a burst.
package sim
