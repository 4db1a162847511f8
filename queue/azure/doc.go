// Package azure is adaptq's Azure Queue Storage driver, on the official SDK
// (azqueue, and azblob for large bodies). Seeds 000–002 describe this very
// service; the other drivers imitate it, this one is it.
//
// Take queues from an Account:
//
//	acct, err := azure.NewAccount(azure.Config{Account: "myaccount", Key: key})
//	…
//	defer acct.Close()
//	q, err := acct.Queue(ctx, "orders") // created unless Config.NoCreate
//
// or, importing the package for its side effect, open one by URL with
// queue.Open (see OpenURL for every parameter):
//
//	azure://myaccount/orders                         credential from $AZURE_STORAGE_CONNECTION_STRING
//	azure://myaccount/orders?key_env=STORAGE_KEY     a shared key from the environment
//	azure://myaccount/orders?sas_env=ORDERS_SAS      a SAS token from the environment
//	azure://myaccount/orders?auth=entra              Microsoft Entra ID: managed identity, workload identity, az login …
//	azure://devstoreaccount1/orders?endpoint=http://127.0.0.1:10001/devstoreaccount1
//	azure:///orders?dev=true                         Azurite on its default ports
//
// # Credentials
//
// One of: a connection string in an environment variable
// (connection_string_env=NAME, or $AZURE_STORAGE_CONNECTION_STRING when the
// URL names none; UseDevelopmentStorage=true works), a shared key (key_env=,
// or key= in the URL), a SAS token (sas_env=, or sas=), or Microsoft Entra
// ID (auth=, below). Azurite's development account, devstoreaccount1,
// needs none: its published key is used. A SAS for claim-check must cover
// the blob service too (an account SAS with ss=bq). Secrets never appear
// in errors or logs: URLs are shown through queue.Redact, and errors carry
// Azure's status, code and message, never a request's query string, a
// token or a secret.
//
// # Microsoft Entra ID
//
// auth= authorizes requests with Entra ID bearer tokens from the SDK's
// azidentity, for the queue and the claim-check blobs alike (scope
// TokenScope, https://storage.azure.com/.default); no key or SAS is then
// read, so it works on accounts with shared key access disabled:
//
//	auth=entra                     DefaultAzureCredential: environment, workload identity,
//	                               managed identity, then az / azd / PowerShell logins
//	auth=entra&client_id=ID        a user-assigned identity: workload identity if the pod
//	                               has it ($AZURE_FEDERATED_TOKEN_FILE), else managed identity
//	auth=managed_identity          the host's system-assigned identity (client_id=: a user-assigned one)
//	auth=workload_identity         AKS workload identity (client_id=, tenant_id= or the
//	                               webhook's AZURE_CLIENT_ID, AZURE_TENANT_ID)
//	auth=azure_cli                 az login, for development (tenant_id=)
//
// In code, Config.Credential takes any azcore.TokenCredential. Endpoints
// must be https (Azurite: a certificate and --oauth basic; the tests do
// that, see azuritetest.Options). The identity needs Azure RBAC roles on
// the storage account, or on the queue and the container:
//
//	open (create=true)   Create Queue          Storage Queue Data Contributor
//	open (create=false)  Get Queue Metadata    Storage Queue Data Reader
//	put                  Put Message           Storage Queue Data Message Sender
//	get, delete          Get/Delete Messages   Storage Queue Data Message Processor
//	peek                 Peek Messages         Storage Queue Data Reader
//	count                Get Queue Metadata    Storage Queue Data Reader
//	update               Update Message        Storage Queue Data Contributor
//	clear                Clear Messages        Storage Queue Data Contributor
//	claim-check          Put/Get/Delete Blob,  Storage Blob Data Contributor
//	                     List Blobs, Create Container
//
// (each cell the least built-in role; Contributor covers every queue
// row). A listener gets, deletes, updates visibility (renewal, release on
// shutdown, failure backoff), reads the depth and puts to the poison
// queue: give a worker Storage Queue Data Contributor (and Storage Blob
// Data Contributor with claim-check); a producer that only puts needs
// Message Sender.
//
// A refusal is an *Error matching ErrAuth whose text says what to fix: a
// 403 AuthorizationPermissionMismatch names the operation, the
// credential and the role it lacks (assignments take minutes to apply);
// a token for another audience or tenant says so; a 403
// KeyBasedAuthenticationNotPermitted says shared key access is disabled
// and to use auth=entra. A credential that gets no token gives a
// *CredentialError (also ErrAuth) that names it ("auth=managed_identity
// (user-assigned, client id …)", "Config.Credential (*pkg.T)") and says
// why, on one line: each credential of DefaultAzureCredential's chain and
// why it was unavailable, or the token service's answer. It is transient
// when the token service was unreachable, timed out or answered 408, 429
// or 5xx, and not when no token source is configured or the identity was
// refused. The listener retries a failed get either way, after its error
// backoff, logging non-transient errors at error level, and carries on
// once the credential works.
//
// # Bodies
//
// Bodies are bytes and round-trip exactly (the Windows Azure Queue white paper §6.7): by default they
// travel base64-encoded, as Azure Functions and the other SDKs' base64
// policies expect. encoding=text sends them as they are, for producers and
// consumers that use plain text; Put then refuses (queue.ErrInvalidArgument,
// nothing written) a body that is not valid UTF-8 or holds a character XML
// text cannot carry unchanged (control characters but tab and newline,
// carriage return, U+FFFE/U+FFFF). In base64 mode a message that is not
// valid base64, written by a text producer, arrives as its text's bytes.
//
// # Claim-check
//
// A message holds 64 KiB of text (MaxMessageSize): 48 KiB of body in base64
// (MaxInlineBody), 64 KiB in text. A larger body, up to Config.MaxBodySize
// (64 MiB by default, max_body_size=), is stored as a block blob in the
// container adaptq-payloads (container=; created on demand unless
// create=false), named QUEUE/<random hex>, and the message carries a small
// JSON envelope:
//
//	{"adaptq":"claim-check/v1","container":"adaptq-payloads","blob":"orders/3f…","size":1048576}
//
// Get and Peek replace the envelope with the blob's bytes, so consumers see
// the original body. No inline body starts with the envelope's first bytes
// (a body that does is stored as a blob as well), so the two never mix up.
// The receipt of a claim-check message names its blob (Azure's pop receipt,
// "|", the blob's name, "|", a tag binding the name to the message's id),
// so Delete, in any process, deletes the blob after the message, or when
// it finds the message gone (a retry of a delete whose answer was lost);
// UpdateVisibility carries the name forward.
//
// A payload whose message expires instead of being deleted is swept: each
// blob's metadata holds its message's TTL (adaptq_ttl, seconds), and Sweep
// deletes the queue's payloads more than Config.PayloadGrace (1 h) past
// their creation time plus it, judged by the storage service's clock (the
// Date of its listing), never a host's, so a host whose clock is wrong
// cannot sweep a live message's payload. (adaptq_expires, the expiry by
// the producer's clock, is still written for earlier drivers, and read
// only for their blobs.) A queue handle that has put or got a
// claim-check message sweeps by itself every Config.SweepInterval (1 h;
// sweep_interval=0 turns it off). Payloads of messages put with
// queue.NoExpiry are never swept. Clear deletes the payloads created more
// than ClearGrace (10 min) before it began: a younger one may belong to a
// message still on its way (Put stores the payload before the message),
// which must find its body after the Clear; a spared payload whose message
// was cleared is the sweep's. A message whose payload blob is gone for
// good (deleted by hand) can never be handled: Get deletes it, logs a
// warning and leaves it out. A payload container that does not exist (it
// was deleted, or blob_endpoint= names another account than the
// producer's) is a configuration error, never taken for lost payloads:
// the Get that meets it releases those messages, and the Gets that follow
// fail with ErrContainerNotFound, naming the container, taking no message
// (whose dequeue count would grow until a listener poisoned it unrun),
// until it exists again. A payload that cannot be read now (the blob
// service fails, access is refused) has its message released and left out
// of the batch, and the Gets that follow fail the same way, taking no
// message, until a request for that payload's properties succeeds: an
// outage of the blob service alone raises a claim-check message's dequeue
// count once, not once a Get.
//
// claim_check=false turns the blob store off: bodies over the inline limit
// are queue.ErrTooLarge. A queue without a blob endpoint (an endpoint= that
// is not https://ACCOUNT.queue.… and no blob_endpoint=) has no claim-check
// either. MaxBodySize reports the limit in force.
//
// Blob calls (upload, download, delete, list) are not queue calls: the cost
// meter does not count them.
//
// # Metadata
//
// Azure keeps no metadata beside a message, so a message put with metadata
// (queue.PutOptions.Metadata) carries it in an envelope in front of its
// body: one line of JSON, a newline, then the body's bytes as they are (or
// the claim-check envelope of a body stored as a blob), encoded as any
// body (base64 or text):
//
//	{"adaptq":"metadata/v1","size":5,"metadata":{"tenant":"t1"}}
//	hello
//
// size is the length of what follows the newline. Get and Peek take the
// envelope off, so consumers see the body and Message.Metadata. A message
// put without metadata is written byte for byte as before, except a body
// that itself starts with {"adaptq":"metadata/v1": that one is enveloped
// with no metadata, so it comes back as it went. Bytes that only look
// like the envelope (a wrong size, other fields, no newline, a key outside
// the key rule) are read as the body they are. The envelope counts against
// the 64 KiB message (MetadataLimits): a body that fits inline alone but
// not with its metadata goes to a blob, the metadata staying in the
// message; without claim-check it is refused with a *queue.MetadataError
// before anything is written.
//
// # Retries and errors
//
// The SDK's retry policy is off (one try per call): the caller's backoff
// (the listener's) is the only retry policy, and the cost meter counts
// every attempt. Each request is bounded by Config.Timeout (timeout=, 30 s).
// A call that changes the queue (Put, Delete, UpdateVisibility, Clear)
// whose caller gives up once its request is sent still waits for the
// answer (within that timeout) and returns what it did: Azure acts on a
// request it received whether or not the client still listens, so a call
// that returned the context's error must not act afterwards. A context
// that ended before the request went out sends nothing.
// Errors map to the contract's:
//
//	400 PopReceiptMismatch                 queue.ErrReceiptMismatch
//	404 MessageNotFound                    queue.ErrNotFound
//	404 QueueNotFound                      created again (create=true, the default), else ErrQueueNotFound
//	413 MessageTooLarge, RequestBodyTooLarge  queue.ErrTooLarge
//	500, 503 ServerBusy, 408, 502, 504     queue.Transient, RetryAfter from Retry-After
//	429                                    queue.Throttled
//	401, 403 authentication/authorization  ErrAuth, with what to fix
//	token credential got no token          ErrAuth, *CredentialError (transient if the token service was unreachable or busy)
//	no response (reset, refused, closed, timeout)  queue.Transient
//
// as *Error values that carry the operation, the queue, the status and
// Azure's code and message (the portable queue names the operation and
// queue in the text). A 503 ServerBusy without a Retry-After leaves
// the wait to the caller's backoff, as the Azure SDK's own policy does (the
// 10 s of "Introducing worker thread governance to Windows Azure SQL
// Database" is SQL Azure's rule, not Storage's).
//
// # Limits and rounding
//
// Azure counts time in whole seconds. Visibility timeouts, initial delays
// and TTLs are rounded up to whole seconds, so nothing is hidden or kept
// for less than asked; a Get's visibility of under a second becomes one
// second. NoExpiry is Azure's messagettl=-1 (a TTL over 68 years is too).
// Timestamps have one-second resolution. Get and Peek take at most 32.
// Count is Azure's ApproximateMessagesCount. Clear is Clear Messages.
// Message order is approximate, as on Azure (Azurite keeps it).
//
// Azure has no batch delete (Features().BatchDelete is false): the portable
// queue's DeleteBatch makes one Delete, one billed request, per message, and
// the cost meter counts each. The driver's own type, *Queue, is reached
// with the portable queue's As (for Sweep and Account).
//
// # Tests
//
// The tests run against Azurite (package azuritetest), installed from
// tools/azurite by `make test` and started on free loopback ports: the
// conformance suite, the listener end to end, faults injected by a proxy,
// claim-check and error mapping; and the conformance suite, claim-check
// and the credential errors again over HTTPS with Entra ID tokens, on an
// Azurite started with a certificate made by the test and --oauth basic.
// No mock of Azure.
package azure
