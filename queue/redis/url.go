package redis

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// URL schemes this package registers with queue.Register.
const (
	Scheme    = "redis"
	SchemeTLS = "rediss"
)

// PasswordEnv names the environment variable that holds the password
// (Redis AUTH, with the URL's user name for an ACL user). A password in the
// URL is refused: URLs end up in config files and logs.
const PasswordEnv = "ADAPTQ_REDIS_PASSWORD"

// URL query parameters.
const (
	// ParamQueue names the queue (required).
	ParamQueue = "queue"
	// ParamPrefix overrides DefaultKeyPrefix.
	ParamPrefix = "prefix"
	// ParamBlockTimeout overrides DefaultBlockTimeout, as a Go duration;
	// set it to the queue's trigger.safety_interval.
	ParamBlockTimeout = "block_timeout"
	// ParamPoolSize sets the connection pool's size (go-redis's PoolSize;
	// default 10 per GOMAXPROCS). While any queue of the pool's Client has
	// subscribers, one of its connections blocks for them, so it is at
	// least 2.
	ParamPoolSize = "pool_size"
)

// minPoolSize is the smallest pool_size: one connection for the
// subscribers' blocking command, one for every other call.
const minPoolSize = 2

func init() {
	o := queue.OpenerFunc(OpenURL)
	queue.Register(Scheme, o)
	queue.Register(SchemeTLS, o)
}

// config is what a URL says.
type config struct {
	tls          bool
	addr         string
	user         string
	db           int
	queue        string
	prefix       string
	blockTimeout time.Duration
	poolSize     int    // 0: go-redis's default
	redacted     string // the URL without the queue, for errors and as the key of shared clients
}

func (cfg *config) redisOptions() *goredis.Options {
	o := &goredis.Options{
		Addr:     cfg.addr,
		Username: cfg.user,
		Password: os.Getenv(PasswordEnv),
		DB:       cfg.db,
		PoolSize: cfg.poolSize,
		// No blind retries: the driver sends again only the scripts that
		// are safe to (DefaultAttempts).
		MaxRetries: -1,
	}
	if cfg.tls {
		host, _, _ := net.SplitHostPort(cfg.addr)
		o.TLSConfig = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	}
	return o
}

func (cfg *config) options() []Option {
	return []Option{WithKeyPrefix(cfg.prefix), WithBlockTimeout(cfg.blockTimeout)}
}

// parseURL reads redis://[USER@]HOST[:PORT][/DB]?queue=NAME[&prefix=P][&block_timeout=D][&pool_size=N].
func parseURL(raw string) (*config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("redis: %w %q: %s", queue.ErrInvalidURL, queue.Redact(raw), queue.ParseReason(err))
	}
	return parse(u)
}

func parse(u *url.URL) (*config, error) {
	red := queue.Redact(u.String())
	bad := func(format string, args ...any) error {
		return fmt.Errorf("redis: %w %q: %s", queue.ErrInvalidURL, red, fmt.Sprintf(format, args...))
	}
	cfg := &config{prefix: DefaultKeyPrefix, blockTimeout: DefaultBlockTimeout}
	switch u.Scheme {
	case Scheme:
	case SchemeTLS:
		cfg.tls = true
	default:
		return nil, bad("scheme %q is not %s or %s", u.Scheme, Scheme, SchemeTLS)
	}
	if u.Opaque != "" || u.Host == "" {
		return nil, bad("want %s://HOST:PORT/DB?%s=NAME", Scheme, ParamQueue)
	}
	if err := queue.CheckParams(u, ParamQueue, ParamPrefix, ParamBlockTimeout, ParamPoolSize); err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			return nil, bad("the URL holds a password: put it in the environment variable %s instead", PasswordEnv)
		}
		cfg.user = u.User.Username()
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "6379"
	}
	cfg.addr = net.JoinHostPort(host, port)
	if p := strings.Trim(u.Path, "/"); p != "" {
		db, err := strconv.Atoi(p)
		if err != nil || db < 0 {
			return nil, bad("database %q is not a number (redis://HOST:PORT/0)", p)
		}
		cfg.db = db
	}
	q := u.Query()
	one := func(k string) (string, bool, error) {
		vs, ok := q[k]
		if !ok {
			return "", false, nil
		}
		if len(vs) > 1 {
			return "", false, bad("parameter %q given %d times", k, len(vs))
		}
		return vs[0], true, nil
	}
	name, _, err := one(ParamQueue)
	if err != nil {
		return nil, err
	}
	cfg.queue = name
	if p, ok, err := one(ParamPrefix); err != nil {
		return nil, err
	} else if ok {
		cfg.prefix = p
	}
	if s, ok, err := one(ParamBlockTimeout); err != nil {
		return nil, err
	} else if ok {
		d, err := time.ParseDuration(s)
		if err != nil || d < time.Second {
			return nil, bad("%s %q is not a duration of at least 1s (e.g. 5m)", ParamBlockTimeout, s)
		}
		cfg.blockTimeout = d
	}
	if s, ok, err := one(ParamPoolSize); err != nil {
		return nil, err
	} else if ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < minPoolSize {
			return nil, bad("%s %q is not a whole number of at least %d (one connection blocks for the subscribers)", ParamPoolSize, s, minPoolSize)
		}
		cfg.poolSize = n
	}
	c := *u
	qs := c.Query()
	qs.Del(ParamQueue)
	c.RawQuery = qs.Encode()
	cfg.redacted = queue.Redact(c.String())
	return cfg, nil
}

// shared holds the Clients opened by URL, one per server, database, user
// and options, reference-counted by the queue handles open on them.
var shared = struct {
	sync.Mutex
	clients map[string]*sharedClient
}{clients: map[string]*sharedClient{}}

type sharedClient struct {
	c    *Client
	refs int
}

// OpenURL opens the queue a redis:// or rediss:// URL names:
//
//	redis://127.0.0.1:6379/0?queue=orders
//	rediss://worker@cache.example.com:6380/2?queue=orders&prefix=app1:&block_timeout=1m&pool_size=32
//
// The password, if any, is read from PasswordEnv. It is what queue.Open
// calls for the schemes. Queues opened by URL on one database share one
// Client (one connection pool, of which one connection blocks for the
// subscribers of all its queues), closed with the last of them. Its
// go-redis client does not retry commands (MaxRetries -1): the driver
// sends again only what is safe to (DefaultAttempts).
func OpenURL(ctx context.Context, u *url.URL) (driver.Queue, error) {
	cfg, err := parse(u)
	if err != nil {
		return nil, err
	}
	if cfg.queue == "" {
		return nil, fmt.Errorf("redis: %w %q: missing the %q parameter (…?%s=NAME)", queue.ErrInvalidURL, cfg.redacted, ParamQueue, ParamQueue)
	}
	if err := queue.ValidateName(cfg.queue); err != nil {
		return nil, fmt.Errorf("redis: open %q: %w", cfg.redacted, err)
	}
	key := cfg.redacted
	c, err := acquire(ctx, key, cfg)
	if err != nil {
		return nil, err
	}
	q, err := c.queue(cfg.queue)
	if err != nil {
		release(key)
		return nil, err
	}
	q.shared = key
	return q, nil
}

func acquire(ctx context.Context, key string, cfg *config) (*Client, error) {
	shared.Lock()
	defer shared.Unlock()
	if s, ok := shared.clients[key]; ok {
		s.refs++
		return s.c, nil
	}
	if cfg == nil {
		return nil, fmt.Errorf("redis: %w", queue.ErrClosed)
	}
	c, err := open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	shared.clients[key] = &sharedClient{c: c, refs: 1}
	return c, nil
}

func release(key string) error {
	shared.Lock()
	s, ok := shared.clients[key]
	if !ok {
		shared.Unlock()
		return nil
	}
	if s.refs--; s.refs > 0 {
		shared.Unlock()
		return nil
	}
	delete(shared.clients, key)
	shared.Unlock()
	return s.c.Close()
}
