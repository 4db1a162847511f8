// Package queue is adaptq's portable queue: the Queue type that programs, the
// listener and the worker hold whatever the backend, the Message type, the
// typed errors callers branch on, and the driver registry behind
// Open(ctx, url). Backends implement the narrow interface of package
// queue/driver; Queue wraps a driver and does, once for all of them, what
// each would otherwise repeat: argument checks against the driver's
// Features, the closed state, metering (Observers such as the cost meter),
// the batch-delete and batch-put fallbacks, and error wrapping and classification
// (IsTransient, RetryAfter). As reaches a driver's own client.
//
// The semantics are Azure Queue Storage's (the Windows Azure Queue white paper and the message visibility article), held on every
// driver by the conformance suite in package queuetest:
//
//   - Put stores a message with a time-to-live and an optional initial
//     visibility delay and returns its id. PutBatch stores many, one
//     result per message, in as few backend calls as the driver allows.
//   - Get returns up to n (1..32) visible messages and hides each of them for
//     the visibility timeout. Every Get hands out a fresh pop receipt and
//     increments the message's dequeue count. An empty queue returns no
//     messages and no error: Get never blocks.
//   - Delete needs the newest pop receipt of the message. A stale receipt (the
//     message timed out and was handed to someone else) is ErrReceiptMismatch;
//     an id that is gone is ErrNotFound. Both are expected events for a
//     consumer, not failures.
//   - UpdateVisibility hides a held message for a new duration (0 releases it
//     at once) and returns a new receipt; the old one is then stale.
//   - Peek shows visible messages without hiding them or touching receipts
//     and dequeue counts (the first Features().MaxPeek; PeekAfter pages
//     beyond them where the backend can, PeekPages); Count is the
//     approximate depth (visible and invisible); Clear removes everything.
//   - A message past its time-to-live is never returned again.
//
// Delivery is therefore at least once: a consumer that crashes, or takes
// longer than the visibility timeout, lets the message reappear for another
// consumer. Handlers must be idempotent.
//
// Drivers live in their own packages (memory, sqlite, azure …) and register a
// URL scheme with Register; programs import the driver for its side effect and
// call Open, or use the driver package's own constructor. Options add
// observers (WithObserver: the cost meter) and driver wrappers (WithWrapper:
// fault injection, tracing), which keep every capability of the driver. The
// layout follows database/sql and go-cloud's pubsub: a small portable API
// here, the driver interface in queue/driver, and one conformance suite
// (queue/queuetest) for all.
package queue
