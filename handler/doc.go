// Package handler is what adaptq runs for each message: the Func type, the
// middleware that composes around it (Recover, Timeout, Logging), typed
// body decoders (JSON, Bytes, String), permanent errors, and the Registry
// that maps queue names to handlers.
//
// # The Func contract
//
// The listener calls a Func once per delivered message and acts on its
// result:
//
//   - nil: the message was processed; the listener deletes it.
//   - an error: the message is left in the queue and reappears for another
//     delivery once its visibility timeout ends.
//   - a permanent error (see Permanent): retrying cannot help, for example a
//     body that does not decode. The listener stops retrying it in a tight
//     loop and later moves it to the poison queue.
//
// # At-least-once delivery
//
// Queues deliver every message at least once, not exactly once. A handler
// that crashes, runs past the visibility timeout, or succeeds just before a
// lost Delete sees the same message again, and two deliveries can even
// overlap. Handlers must therefore be idempotent: processing a message twice
// must have the effect of processing it once. Key side effects on
// Message.ID, which stays the same across every delivery (an upsert keyed by
// the id, a "processed" table, an idempotency key sent to a payment API).
// Message.DequeueCount says how many times the message has been handed out,
// this delivery included.
//
// # Middleware
//
// A Middleware wraps a Func in another Func, as in net/http. Chain(h, a, b, c)
// returns a(b(c(h))): the first middleware is the outermost, it sees the
// message first and the result last. A sensible stack is
//
//	handler.Chain(h, handler.Logging(log), handler.Recover(), handler.Timeout(d))
//
// so that Logging records panics (turned into errors by Recover) and
// timeouts alike.
package handler
