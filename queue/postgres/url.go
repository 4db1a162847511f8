package postgres

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// The URL schemes this package registers with queue.Register.
const (
	Scheme    = "postgres"
	SchemeAlt = "postgresql"
)

// URL query parameters of adaptq's own; the others a URL may have are
// pgx's (PgxParams) and the two server settings ServerParams allows.
const (
	// ParamQueue names the queue (required).
	ParamQueue = "queue"
	// ParamSchema names the PostgreSQL schema (default DefaultSchema).
	ParamSchema = "schema"
	// ParamMigrate: "false" refuses a schema that needs migrations
	// instead of applying them (WithoutMigrate).
	ParamMigrate = "migrate"
	// ParamNotifyInterval overrides DefaultNotifyInterval ("5ms", "0s").
	ParamNotifyInterval = "notify_interval"
	// ParamMaxBody overrides the largest body, in bytes.
	ParamMaxBody = "max_body"
	// ParamAsyncLeases: "true" lets Gets and renewals commit without
	// waiting for the WAL flush (WithAsyncLeases, and its risk).
	ParamAsyncLeases = "async_leases"
)

// adaptqParams are the parameters above, in the order errors list them.
var adaptqParams = []string{ParamQueue, ParamSchema, ParamMigrate, ParamNotifyInterval, ParamMaxBody, ParamAsyncLeases}

// PgxParams are the URL parameters pgx v5.12 reads itself: pgconn's
// connection settings (libpq's names), pgx's statement caches and
// pgxpool's pool settings. pgx sends any other parameter to the server as
// a run-time setting, which refuses a typo at connect time as an
// "unrecognized configuration parameter"; a URL opened by adaptq is
// refused before that, with this list.
var PgxParams = []string{
	// pgconn (github.com/jackc/pgx/v5/pgconn, ParseConfig's notRuntimeParams)
	"host", "port", "database", "user", "password", "passfile",
	"connect_timeout", "sslmode", "sslkey", "sslcert", "sslcertmode",
	"sslrootcert", "sslnegotiation", "sslpassword", "sslsni", "krbspn",
	"krbsrvname", "target_session_attrs", "service", "servicefile",
	"min_protocol_version", "max_protocol_version", "channel_binding",
	"require_auth",
	"dbname", // libpq's name of database
	"ssl",    // ssl=true: the JDBC spelling of sslmode=require
	// pgx (ParseConfig)
	"statement_cache_capacity", "description_cache_capacity", "default_query_exec_mode",
	// pgxpool (ParseConfig)
	"pool_max_conns", "pool_min_conns", "pool_min_idle_conns",
	"pool_max_conn_lifetime", "pool_max_conn_idle_time",
	"pool_health_check_period", "pool_max_conn_lifetime_jitter",
	"pool_ping_timeout",
}

// ServerParams are the run-time parameters a URL may send to the server:
// the two libpq documents as connection parameters. Any other server
// setting goes in options, as libpq's (options=-c statement_timeout=5s,
// URL-encoded: options=-c%20statement_timeout%3D5s); a bare
// statement_timeout=5s is refused like a typo.
var ServerParams = []string{"application_name", "options"}

// checkParams refuses a parameter that is none of adaptq's, pgx's or
// ServerParams, listing those allowed.
func checkParams(u *url.URL) error {
	allowed := make([]string, 0, len(adaptqParams)+len(PgxParams)+len(ServerParams))
	allowed = append(append(append(allowed, adaptqParams...), PgxParams...), ServerParams...)
	return queue.CheckParams(u, allowed...)
}

// pgxQuery encodes params for pgx, which decodes a URL's query as libpq
// does: %20 is a space, + is a plus sign (options=-c%20statement_timeout%3D5s).
// Encode writes a space as +, and any + of the values as %2B.
func pgxQuery(params url.Values) string {
	return strings.ReplaceAll(params.Encode(), "+", "%20")
}

func init() {
	queue.Register(Scheme, queue.OpenerFunc(OpenURL))
	queue.Register(SchemeAlt, queue.OpenerFunc(OpenURL))
}

// shared holds the DBs opened by URL, one per connection string and
// options, reference-counted by the queue handles open on them: the queues
// of one process share one pool and one LISTEN connection.
var shared = struct {
	sync.Mutex
	dbs map[string]*sharedDB
}{dbs: map[string]*sharedDB{}}

type sharedDB struct {
	db   *DB
	refs int
	// open is the options the DB was opened with.
	conn string
	opts []Option
}

// OpenURL opens the queue a postgres:// URL names:
//
//	postgres://USER@HOST:PORT/DB?queue=NAME
//	postgres://USER:PASSWORD@HOST/DB?queue=NAME&schema=jobs&pool_max_conns=16&sslmode=require
//
// It is what queue.Open calls for the schemes postgres and postgresql. All
// queues opened by URL with the same connection and options share one DB.
func OpenURL(ctx context.Context, u *url.URL) (driver.Queue, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("postgres: open %q: %w: %s", queue.Redact(u.String()), queue.ErrInvalidURL, fmt.Sprintf(format, args...))
	}
	if u.Scheme != Scheme && u.Scheme != SchemeAlt {
		return nil, bad("scheme %q is not %q", u.Scheme, Scheme)
	}
	if err := checkParams(u); err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	params := u.Query()
	one := func(key string) (string, error) {
		vs := params[key]
		if len(vs) > 1 {
			return "", bad("parameter %q given %d times", key, len(vs))
		}
		params.Del(key)
		if len(vs) == 0 {
			return "", nil
		}
		return vs[0], nil
	}
	name, err := one(ParamQueue)
	if err != nil {
		return nil, err
	}
	if name == "" {
		return nil, bad("missing the %q parameter (…?%s=NAME)", ParamQueue, ParamQueue)
	}
	if err := queue.ValidateName(name); err != nil {
		return nil, fmt.Errorf("postgres: open %q: %w", queue.Redact(u.String()), err)
	}
	var opts []Option
	var key []string
	if s, err := one(ParamSchema); err != nil {
		return nil, err
	} else if s != "" {
		if err := validSchema(s); err != nil {
			return nil, bad("%v", err)
		}
		opts = append(opts, WithSchema(s))
		key = append(key, "schema="+s)
	}
	if s, err := one(ParamMigrate); err != nil {
		return nil, err
	} else if s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, bad("%s %q is not true or false", ParamMigrate, s)
		}
		if !b {
			opts = append(opts, WithoutMigrate())
			key = append(key, "migrate=false")
		}
	}
	if s, err := one(ParamNotifyInterval); err != nil {
		return nil, err
	} else if s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return nil, bad("%s %q is not a duration (e.g. 5ms)", ParamNotifyInterval, s)
		}
		opts = append(opts, WithNotifyInterval(d))
		key = append(key, "notify="+d.String())
	}
	if s, err := one(ParamMaxBody); err != nil {
		return nil, err
	} else if s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, bad("%s %q is not a positive number of bytes", ParamMaxBody, s)
		}
		opts = append(opts, WithMaxBodySize(n))
		key = append(key, "max_body="+s)
	}
	if s, err := one(ParamAsyncLeases); err != nil {
		return nil, err
	} else if s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, bad("%s %q is not true or false", ParamAsyncLeases, s)
		}
		if b {
			opts = append(opts, WithAsyncLeases())
			key = append(key, "async_leases")
		}
	}
	c := *u
	c.Scheme = "postgres"
	c.RawQuery = pgxQuery(params)
	conn := c.String()
	k := conn + "#" + strings.Join(key, "&")
	db, err := acquireNew(ctx, k, conn, opts)
	if err != nil {
		return nil, err
	}
	q, err := db.queue(ctx, name)
	if err != nil {
		_ = release(k)
		return nil, err
	}
	q.onClose = func() error { return release(k) }
	q.sharedKey = k
	return q, nil
}

func acquireNew(ctx context.Context, key, conn string, opts []Option) (*DB, error) {
	shared.Lock()
	defer shared.Unlock()
	if s, ok := shared.dbs[key]; ok {
		s.refs++
		return s.db, nil
	}
	db, err := Open(ctx, conn, opts...)
	if err != nil {
		return nil, err
	}
	shared.dbs[key] = &sharedDB{db: db, refs: 1, conn: conn, opts: opts}
	return db, nil
}

// acquire takes another reference on a DB opened by URL.
func acquire(ctx context.Context, key string, _ []Option) (*DB, error) {
	shared.Lock()
	defer shared.Unlock()
	s, ok := shared.dbs[key]
	if !ok {
		return nil, fmt.Errorf("postgres: %w", queue.ErrClosed)
	}
	s.refs++
	return s.db, nil
}

func release(key string) error {
	shared.Lock()
	defer shared.Unlock()
	s, ok := shared.dbs[key]
	if !ok {
		return nil
	}
	if s.refs--; s.refs > 0 {
		return nil
	}
	delete(shared.dbs, key)
	return s.db.Close()
}
