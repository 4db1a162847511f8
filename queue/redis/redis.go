package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// Defaults.
const (
	// DefaultKeyPrefix starts every key the driver writes, so that adaptq's
	// keys are told apart from an application's in a shared database.
	DefaultKeyPrefix = "adaptq:"

	// DefaultBlockTimeout is how long an idle subscriber blocks on the
	// server before it blocks again: the listener's default
	// trigger.safety_interval (listener.DefaultSafetyInterval, 5 min), so
	// that an idle worker sends one blocking command per safety interval.
	// A put wakes it at once whatever the timeout; the timeout only bounds
	// how long a silently dropped connection (a NAT that forgot it) goes
	// unnoticed. go-redis reads a blocking reply for the timeout plus 10 s,
	// so it stays under the client's read deadline.
	DefaultBlockTimeout = 5 * time.Minute

	// wakeCoalesce is how long a subscriber waits after a wake-up before it
	// blocks again. Under a steady stream of puts every put sets the
	// marker; without a pause each process would pop it once per round
	// trip. Two milliseconds bound that to 500 commands a second per
	// process while adding nothing to the wake-up of an idle worker (the
	// first put after a quiet spell finds the subscriber blocked).
	wakeCoalesce = 2 * time.Millisecond

	// clearChunk is how many messages one step of Clear deletes, so that
	// clearing a large queue does not hold the server for long.
	clearChunk = 1000

	// DefaultAttempts is how many times in all the driver sends a script
	// that is safe to send again (a put under its id, a visibility update
	// under its new receipt, a read) when it fails transiently: go-redis's
	// own default, one try and MaxRetries = 3 retries. The driver's other
	// scripts (get, delete) are sent once: a lost reply after the server
	// acted cannot be told from a request that never arrived, and sending
	// them again would act twice or report the first act as a failure. So
	// the clients Open makes have go-redis's retries off (MaxRetries -1),
	// and a client passed to New should too.
	DefaultAttempts = 4

	// BusyTasks is the pool a listener left to its default tasks grows to
	// while its gets come back full (driver.Features.BusyTasks): each Get
	// is a round trip, which one task waits on in turn while Redis idles,
	// so that one task drained at 0.27× the rate of PEERS.md's
	// hand-written loop of 8 goroutines (bench/cmd/redisprobe, issue 34).
	// Concurrent gets keep the server busy; past a few they only queue
	// behind each other on its one thread: draining 30,000 messages with
	// a default listener, 4 tasks ran at 54–117k msgs/s and 7.8–9.4 µs of
	// Redis CPU per message, 8 at 57–97k and 9.0–10.1 µs, one (before)
	// at 53–65k and 10.7–11.0 µs (3 runs each, alternating, 2 busy cores).
	BusyTasks = 4

	// putResendWindow: Put starts no send of a put later than this after
	// its first. With go-redis's default timeouts (a pool wait of 4 s, a
	// dial of 5 s, a write of 3 s) every send of a put is written within
	// 22 s of the put's start, before the server stored the message plus
	// tombstoneLife less 8 s.
	putResendWindow = 10 * time.Second

	// tombstoneLife is how long after a put stored its message a delete
	// keeps the message's id (a tombstone: a member of a set per queue and
	// second of the ids' time, PREFIX{NAME}:t:T, that Redis expires), so
	// that a send of that put arriving later (sent again after a lost
	// reply, or a first send late in the network) stores nothing; a delete
	// of an older message keeps none. A consumer that deletes at once
	// keeps the ids of about the last tombstoneLife of its messages, some
	// 80 bytes each.
	tombstoneLife = 30 * time.Second

	// retryMinBackoff and retryMaxBackoff bound the pause before the n-th
	// attempt (doubling from the first): go-redis's MinRetryBackoff and
	// MaxRetryBackoff defaults.
	retryMinBackoff = 8 * time.Millisecond
	retryMaxBackoff = 512 * time.Millisecond
)

// Option configures a Client.
type Option func(*options)

type options struct {
	clock        queue.Clock // nil: the server's clock
	prefix       string
	maxBody      int
	blockTimeout time.Duration
}

func defaultOptions() options {
	return options{prefix: DefaultKeyPrefix, maxBody: queue.DefaultMaxBodySize, blockTimeout: DefaultBlockTimeout}
}

// WithClock makes every script read the time from c instead of the
// server's clock (TIME). Tests and the simulator pass a fake clock to move
// time instead of sleeping. Every process that uses the queue must then
// read the same clock; production leaves the server's.
func WithClock(c queue.Clock) Option { return func(o *options) { o.clock = c } }

// WithKeyPrefix sets the prefix of every key (default DefaultKeyPrefix).
func WithKeyPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithMaxBodySize sets the largest body Put accepts, in bytes (default
// queue.DefaultMaxBodySize, Azure's 64 KiB). Values below 1 leave the
// default.
func WithMaxBodySize(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.maxBody = n
		}
	}
}

// WithBlockTimeout sets how long an idle subscriber blocks on the server
// before blocking again (default DefaultBlockTimeout). Values below one
// second leave the default.
func WithBlockTimeout(d time.Duration) Option {
	return func(o *options) {
		if d >= time.Second {
			o.blockTimeout = d
		}
	}
}

// Client holds the queues of one Redis database: a go-redis client, and
// one connection of its pool on which the subscribers of all its queues
// block while any has subscribers. It is safe for concurrent use.
type Client struct {
	rdb  *goredis.Client
	owns bool
	o    options

	closed atomic.Bool
	puts   atomic.Uint64 // puts so far, for the put's periodic sweep
	wake   waker
	mono   func() time.Time // the clock of Put's resend window; nil: time.Now
}

// New returns a Client over rdb, which stays the caller's: Close does not
// close it. Configure rdb with MaxRetries -1: go-redis retries every
// command alike, and a get or delete whose reply was lost must not be sent
// again (see DefaultAttempts). Subscribers hold one connection of rdb's
// pool while any queue of the Client has them.
func New(rdb *goredis.Client, opts ...Option) *Client {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	c := &Client{rdb: rdb, o: o}
	c.wake.c = c
	return c
}

// Open connects to the Redis database a redis:// or rediss:// URL names
// (its queue parameter, if any, is ignored) and checks that it answers.
// The password comes from the environment (PasswordEnv), never from the
// URL.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Client, error) {
	cfg, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return open(ctx, cfg, opts...)
}

func open(ctx context.Context, cfg *config, opts ...Option) (*Client, error) {
	ro := cfg.redisOptions()
	if ro.Username != "" && ro.Password == "" {
		// go-redis authenticates only with a password: without one the
		// connection would be the default user's, with its rights.
		return nil, fmt.Errorf("redis: %w %q: user %q needs its password in the environment variable %s", queue.ErrInvalidURL, cfg.redacted, ro.Username, PasswordEnv)
	}
	rdb := goredis.NewClient(ro)
	c := New(rdb, append(cfg.options(), opts...)...)
	c.owns = true
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis: open %s: %w", cfg.redacted, err)
	}
	return c, nil
}

// Redis returns the go-redis client behind c.
func (c *Client) Redis() *goredis.Client { return c.rdb }

// Queue returns a handle on the queue called name. Queues exist as soon as
// a message is put to them; opening one writes nothing. opts configure the
// handle as in queue.New.
func (c *Client) Queue(name string, opts ...queue.Option) (*queue.Queue, error) {
	d, err := c.queue(name)
	if err != nil {
		return nil, err
	}
	return queue.New(d, opts...), nil
}

// Driver returns the driver of the queue called name, for a driver built
// on this one (a wrapper registered under its own scheme).
func (c *Client) Driver(name string) (driver.Queue, error) { return c.queue(name) }

func (c *Client) queue(name string) (*redisQueue, error) {
	if err := queue.ValidateName(name); err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	if c.closed.Load() {
		return nil, fmt.Errorf("redis: open %q: %w", name, queue.ErrClosed)
	}
	base := c.o.prefix + "{" + name + "}:"
	return &redisQueue{
		c:     c,
		name:  name,
		base:  base,
		keys2: []string{base + "z", base + "x"},
		keys3: []string{base + "z", base + "x", base + "w"},
	}, nil
}

// Close stops the subscribers and, for a Client made by Open, closes the
// connections. Queues of c fail with queue.ErrClosed afterwards.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	r := c.wake.stop()
	var err error
	if c.owns {
		if e := c.rdb.Close(); e != nil && !errors.Is(e, goredis.ErrClosed) {
			err = fmt.Errorf("redis: close: %w", e)
		}
	}
	// CLIENT UNBLOCK (or, for a client of our own, closing the
	// connections) ends the subscribers' loop at once; else its block
	// timeout does.
	if r != nil {
		select {
		case <-r.done:
		case <-time.After(c.o.blockTimeout + 15*time.Second):
		}
	}
	return err
}

// now is the time argument of a script: "" for the server's clock, else
// the injected clock's microseconds.
func (c *Client) now() string {
	if c.o.clock == nil {
		return ""
	}
	return strconv.FormatInt(c.o.clock.Now().UnixMicro(), 10)
}

// monoNow is the clock of Put's resend window: time.Now, whose monotonic
// reading no skew or clock step moves, unless a test set another.
func (c *Client) monoNow() time.Time {
	if c.mono != nil {
		return c.mono()
	}
	return time.Now()
}

// localNow is the best local guess of the scripts' clock, for the
// subscriber's timers.
func (c *Client) localNow() time.Time {
	if c.o.clock == nil {
		return wallNow()
	}
	return c.o.clock.Now()
}

// skew is added to the process's clock wherever the driver reads it (the
// time part of ids, the subscribers' timers). It is zero but in tests,
// which move it to show that no decision of the scripts depends on the
// process's clock: they read the server's.
var skew atomic.Int64

// wallNow is the process's clock, plus skew.
func wallNow() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
