// Package redis is the Redis driver: queues with Azure Queue semantics
// (batch gets of up to 32, visibility timeouts, pop receipts, dequeue
// counts) kept in Redis 6.2 or later, on go-redis v9, with a native wake-up
// that leaves an idle worker blocked on the server instead of polling.
//
//	redis://127.0.0.1:6379/0?queue=orders
//	rediss://worker@cache.example.com:6380/2?queue=orders&prefix=app1:&block_timeout=5m&pool_size=32
//
// The password comes from the environment variable ADAPTQ_REDIS_PASSWORD
// (PasswordEnv), never from the URL, and a URL that names a user needs it
// (go-redis would otherwise connect as the default user); rediss://
// connects with TLS.
//
// # Data model
//
// A queue is a sorted set of message ids scored by the microsecond at which
// each becomes visible, a hash per message (body, receipt, dequeue count,
// inserted, expires), a sorted set of ids by expiry for the messages that
// have a TTL, and a wake-up marker, all under PREFIX{NAME}: (see
// scripts.go). Every operation is one Lua script sent with EVALSHA, so each
// is atomic and one round trip: Get of up to 32 takes the visible head of
// the sorted set and rescores it to now+visibility with a new receipt per
// message; Delete, DeleteBatch and UpdateVisibility check the newest
// receipt; Count is ZCARD less a ZCOUNT of the expired, exact in O(log n).
//
// Message ids are ULIDs chosen by the putting process (26 characters: its
// clock's milliseconds, then 80 random bits), unique across server
// restarts, snapshots and failovers, where a counter on the server would
// go back. They grow within a process; across processes their order is
// their clocks', and no order is promised.
//
// # Expiry
//
// Messages past their TTL are never returned. On the server's clock, Redis
// deletes each message's hash at its expiry by itself (PEXPIREAT), and the
// queue's sorted sets with their last message, so that an expired backlog
// leaves no keys with no call on the queue; a queue that also holds a
// message without TTL keeps the expired ids in its sorted sets (tens of
// bytes each, never counted) until a get, a peek or a put sweeps them. A
// get or peek drops at most 1,000 expired messages per script and calls
// again until none hide the live ones, so no call holds the server for
// long whatever the backlog.
//
// # Clock
//
// The scripts read the server's clock (TIME), so the processes of a worker
// fleet agree on visibility and expiry whatever their own clocks say.
// WithClock replaces it with an injected clock, passed as an argument to
// every script: tests and the simulator run in virtual time that way, and
// every process on the queue must then use the same clock.
//
// # Native notify
//
// Features().NativeNotify is set: Subscribe (which the worker uses when a
// queue's trigger is enabled) blocks in BZPOPMIN on the queue's marker key.
// A Client blocks on the markers of all its subscribed queues at once, on
// one connection of its pool, whatever the number of queues and
// subscribers. A put from any process wakes it at once; an idle worker
// sends one blocking command per block timeout (DefaultBlockTimeout, the
// listener's default safety interval; block_timeout in the URL). See
// notify.go.
//
// # Durability
//
// Features().Durability is ServerMemory: an acknowledged put is in the
// server's memory and survives any worker crash, but what survives a Redis
// restart is Redis's persistence setting. Without AOF (or with RDB
// snapshots only) a restart loses every message put since the last
// snapshot and brings back those deleted since, to be handled again;
// with appendonly yes and appendfsync everysec it loses up to the last
// second; with appendfsync always nothing acknowledged is lost, as with
// driver.PowerLoss. Replicas are asynchronous: a failover may lose the
// last writes. Run the server with maxmemory-policy noeviction (Redis's
// default): an eviction policy would drop messages to make room.
//
// # Errors and retries
//
// Classify marks as transient a lost connection and the server's "not now"
// answers: LOADING, BUSY, READONLY after a failover, MASTERDOWN, TRYAGAIN,
// CLUSTERDOWN. A reply lost after the server acted cannot be told from a
// request that never arrived, so the clients Open makes do not let go-redis
// retry (MaxRetries -1). The driver itself sends again, up to
// DefaultAttempts in all, only what is safe to: a put (the script writes
// its id only if no message has it and no delete left its tombstone, so
// the message is stored once, and a send that arrives after a consumer got
// or deleted the message changes nothing), a visibility update (its new
// receipt, chosen by the client, marks it done), and reads. Put starts no
// send more than 10 s after its first, and a delete keeps the id until
// 30 s after the put stored it (Clear keeps it too): only a send that
// takes more than 20 s from its start to reach the server, arriving after
// the delete, could store the message again (with go-redis's default
// timeouts a send is written within 12 s of its start), as could a first
// send late in the network arriving after a message with a TTL shorter
// than that expired, unhandled or while held. A put sent again asks for
// its TTL less the time since its first send started, and is not sent
// once that is over, so a message it stores expires no later than the
// first send's would have. Once a send failed so that it may have acted,
// the call's error is transient whatever a later send met (a full server,
// a closed Client). A get, delete or batch delete whose reply was lost
// fails with a transient error: the get's messages come back after their
// visibility timeout, with their dequeue counts raised by the get, and the
// retried delete finds ErrNotFound. Give a client passed to New MaxRetries
// -1 too.
//
// # As
//
// A queue's As gives the *Client (a *(*redis.Client) target) or the
// go-redis client (*(*goredis.Client)).
package redis
