// Package handler is what adaptq runs for each message: the Func type, the
// middleware that composes around it (Recover, Timeout, Logging), typed
// body decoders (JSON, Bytes, String), permanent errors, the Registry
// that maps queue names to handlers, and Exec and HTTP, which hand messages
// to code in other languages.
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
//
// # Handlers in other languages
//
// The two sides of a queue may be written in different languages (the
// "Windows Azure Queue" white paper). Exec and HTTP make any program a handler, with the same contract
// as a Func:
//
//   - Exec runs a command per message (split from a config string by
//     ParseCommand; no shell unless you write sh -c '…'). The body arrives
//     on standard input, byte for byte; ADAPTQ_MESSAGE_ID,
//     ADAPTQ_DEQUEUE_COUNT, ADAPTQ_INSERTED_AT and ADAPTQ_QUEUE are in the
//     environment. Exit 0 is success; exit 65 (EX_DATAERR, "the input data
//     was incorrect") is a permanent failure; any other exit is retried.
//     Standard error's tail goes into the error, so print the reason for a
//     failure there, last.
//   - HTTP POSTs the body to a URL with the headers X-Adaptq-Message-Id,
//     X-Adaptq-Dequeue-Count, X-Adaptq-Inserted-At and X-Adaptq-Queue. A
//     2xx response is success; 4xx other than 408 and 429 is a permanent
//     failure; 408, 429, 5xx and network errors are retried.
//
// A worker in Python, for example, needs nothing from adaptq:
//
//	import json, os, sys
//	try:
//	    order = json.load(sys.stdin)
//	except ValueError as e:
//	    print(f"not JSON: {e}", file=sys.stderr)
//	    sys.exit(65)  # EX_DATAERR: permanent, retrying cannot help
//	ship(order, idempotency_key=os.environ["ADAPTQ_MESSAGE_ID"])
//
// Delivery is still at least once: key side effects on the message id, as
// above. Both handlers stop the work when the handler's context ends or
// their own timeout passes (Exec kills the command's whole process group),
// and neither ever puts the message body in an error.
package handler
