// Package sqs is adaptq's Amazon SQS driver (standard queues), on the
// official SDK (aws-sdk-go-v2's service/sqs). SQS's semantics are Azure
// Queue Storage's almost one for one: receipt handles are pop receipts,
// the visibility timeout hides what a receive returns, and
// ApproximateReceiveCount is the dequeue count.
//
// Take queues from a Client:
//
//	c, err := sqs.NewClient(ctx, sqs.Config{Region: "eu-west-1", Account: "123456789012"})
//	…
//	defer c.Close()
//	q, err := c.Queue(ctx, "orders") // created unless Config.NoCreate
//
// or, importing the package for its side effect, open one by URL with
// queue.Open (see OpenURL for every parameter):
//
//	sqs://eu-west-1/123456789012/orders
//	sqs://eu-west-1/orders                                       the credentials' account
//	sqs://us-east-1/000000000000/orders?endpoint=http://127.0.0.1:4566   an emulator, LocalStack
//
// # Credentials
//
// From the standard AWS chain: the environment (AWS_ACCESS_KEY_ID …),
// the shared config and credentials files (profile=, or $AWS_PROFILE),
// SSO, web identity, ECS and EC2 roles; Config.Credentials replaces it,
// and anonymous=true sends unsigned requests to an emulator that needs
// none. With endpoint= (an emulator) the chain skips the EC2 metadata
// service, so nothing leaves for 169.254.169.254 (AWS_EC2_METADATA_DISABLED=false
// asks it, for an instance role behind a VPC endpoint), and a chain that
// finds nothing else fails at once with ErrNoCredentials, saying how to
// give them. Nothing secret goes in a URL, and errors carry SQS's code and
// message, never a credential.
//
// # Retries and errors
//
// The SDK's retries are off (one attempt per call): the caller's backoff
// (the listener's) is the only retry policy, and the cost meter counts
// every attempt. Each request is bounded by Config.Timeout (timeout=,
// 30 s; a long poll gets its wait on top). A call that changes a queue
// (Put, Delete, DeleteBatch, UpdateVisibility and its batch, Clear) whose
// caller gives up once its request is sent still waits for the answer
// (within that timeout) and returns what it did: SQS acts on a request it
// received whether or not the client still listens, so a call that
// returned the context's error must not act afterwards. A context that
// ended before the request went out sends nothing. Errors map to the
// contract's:
//
//	QueueDoesNotExist                    ErrQueueNotFound (open with create=false; a queue deleted while open)
//	ReceiptHandleIsInvalid, MessageNotInflight  queue.ErrReceiptMismatch (ChangeMessageVisibility), queue.ErrNotFound (delete)
//	InvalidParameterValue "… shorter than …"    queue.ErrTooLarge
//	throttling, 5xx, no response         queue.Transient
//	PurgeQueueInProgress                 queue.Transient, RetryAfter 60 s
//
// as *Error values with the action, status, code and message.
//
// # Semantics, and where SQS differs from the contract
//
// A receive returns at most 10 messages (Features().MaxBatch; the listener
// asks for 10). Deletes go in DeleteMessageBatch calls of up to 10
// (Features().BatchDelete), and the portable queue's UpdateVisibilityBatch
// (releases) in ChangeMessageVisibilityBatch calls of up to 10. There is
// no peek (Features().MaxPeek is 0).
// Count is ApproximateNumberOfMessages + …NotVisible + …Delayed, an
// approximation. Clear is PurgeQueue (one a minute per queue). Visibility
// timeouts and delays are whole seconds, rounded up; SQS hides a message
// for at most 12 hours (MaxVisibility) and delays a new one for at most
// 15 minutes (MaxDelay): longer ones are queue.ErrInvalidArgument.
//
// Receipts are lax (Features().LaxReceipts): SQS cannot tell a stale
// receipt handle or a message already deleted, and answers a delete with
// one by succeeding and deleting nothing, so Delete reports neither
// queue.ErrReceiptMismatch nor queue.ErrNotFound for them (the listener
// counts such a delete as a success). ChangeMessageVisibility keeps the
// handle, so UpdateVisibility returns the receipt it was given; with a
// stale one it fails with queue.ErrReceiptMismatch. A pop receipt carries
// the queue's name and the message's expiry beside SQS's handle, so a
// receipt of another queue is ErrNotFound without a request, and a delete
// or visibility change of a message past its TTL is ErrNotFound.
//
// Time-to-live is adaptq's, per message: SQS keeps messages for its
// queue's MessageRetentionPeriod, so the driver writes the TTL as a message
// attribute (AttrTTL); a message expires at its SentTimestamp plus its
// TTL, and a Get deletes and leaves out what is past it (an unmetered
// DeleteMessageBatch). Both times are SQS's: whether a message has expired
// is judged by the Date of SQS's answer (whole seconds, rounded down),
// never by this process's clock, so a consumer whose clock runs fast
// deletes no live message and one whose clock runs slow gets no expired
// one; an expired message may live up to a second longer, and an answer
// without a Date (a proxy that drops it) expires nothing. A queue the
// driver creates keeps messages 14 days, SQS's maximum; no message
// outlives its queue's retention period, queue.NoExpiry included.
//
// # Long polling: the idle wait
//
// Get returns at once, as the contract says. GetWait, which the listener
// uses for its idle waits (Features().LongPoll), is a ReceiveMessage with
// WaitTimeSeconds: SQS holds the call open until a message arrives, up to
// 20 s, and returns it at once, received and hidden like any Get's (so
// dequeue counts stay true). The listener's idle delay becomes the wait
// once it reaches a second; when it has grown to 20 s (some 25 s after the
// queue empties, with the default backoff) an idle task makes one call per
// 20 s, 180 an hour, and sees a message the moment it is put, with no
// trigger. A queue whose ReceiveMessageWaitTimeSeconds attribute is set
// makes every Get a long poll (SQS omits a wait of 0 from the request);
// the driver warns when it opens one.
//
// # Bodies
//
// Any bytes round-trip. A body that is text within the Basic
// Multilingual Plane (valid UTF-8 of the characters #x9, #xA, #xD, #x20
// to #xD7FF and #xE000 to #xFFFD: no control characters but tab, newline
// and carriage return) is sent as it is, byte for byte, for consumers in
// other languages. Any other travels in base64, with the message attribute
// adaptq-encoding (AttrEncoding) set to "base64", which such a consumer
// checks before reading the body: bytes that are not UTF-8, control
// characters, and text beyond the plane (emoji), which SQS accepts but its
// emulators refuse (fauxqs answers InvalidMessageContents), so that one
// wire format holds on both. An empty body is sent as "-" with
// adaptq-encoding "empty". SQS takes messages of up
// to 1 MiB (since August 2025; a queue's MaximumMessageSize may be lower,
// and the driver creates queues with 1 MiB). Features().MaxBody is the
// largest body that fits whatever its bytes: three quarters of the queue's
// message size, less room for the driver's attributes (786,240 bytes at 1
// MiB). Text bodies are held to the same limit.
//
// # Metadata
//
// A message's metadata (queue.PutOptions.Metadata) travels as message
// attributes of type String, beside the driver's own (adaptq-encoding,
// adaptq-ttl), so consumers in other languages read it as attributes: at
// most 8 (SQS's 10 less the driver's two), and body and metadata share
// the message size (MetadataLimits). Get receives every attribute: another
// producer's String and Number attributes come as Message.Metadata,
// Binary ones and the driver's own do not.
//
// # Cost
//
// Every call is a billed request, $0.40 per million (PricePer10k), and
// each 64 KiB of payload counts as one more (Features().BillingChunk): the
// cost meter bills a put or get of 200 KiB as 4 requests.
//
// # Poison messages
//
// adaptq's poison queue, by default: the worker opens QUEUE-poison beside
// the queue (a Sibling) and the listener moves a message there after
// max_dequeue_count runs. A queue with its own RedrivePolicy is left to
// SQS (Features().ServerPoison): the listener moves nothing and SQS moves a
// message to its dead-letter queue after maxReceiveCount receives. SQS's
// rule wins.
//
// # Tests
//
// The tests run against fauxqs (package sqstest), installed from
// tools/fauxqs by `make test` and started on a free loopback port: the
// conformance suite, the listener end to end, a process killed midway,
// queuetest's fault layer (TestFaults: lost replies, dropped requests, a
// caller that gives up, an expired backlog, a client whose clock runs a
// minute ahead of SQS's, connections dropped mid-drain) through queue.Open,
// and errors SQS answers (500, 503, throttling) from queuetest's HTTP fault
// proxy. No mock of SQS.
package sqs
