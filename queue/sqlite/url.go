package sqlite

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// Scheme is the URL scheme this package registers with queue.Register.
const Scheme = "sqlite"

// URL query parameters.
const (
	// ParamQueue names the queue (required).
	ParamQueue = "queue"
	// ParamBusyTimeout overrides DefaultBusyTimeout, as a Go duration
	// ("10s"). The first URL to open a file sets it for every queue of that
	// file in the process.
	ParamBusyTimeout = "busy_timeout"
	// ParamSync is "normal" (the default, SyncNormal) or "full" (SyncFull:
	// a commit is flushed to the disk before a Put returns). Like
	// busy_timeout, the first URL to open a file sets it for the process.
	ParamSync = "sync"
)

func init() {
	queue.Register(Scheme, queue.OpenerFunc(OpenURL))
}

// shared holds the DBs opened by URL, one per file, reference-counted by
// the queue handles open on them.
var shared = struct {
	sync.Mutex
	dbs map[string]*sharedDB
}{dbs: map[string]*sharedDB{}}

type sharedDB struct {
	db   *DB
	refs int
}

// OpenURL opens the queue a sqlite:// URL names:
//
//	sqlite:///abs/path/file.db?queue=NAME
//	sqlite://./rel/path/file.db?queue=NAME&busy_timeout=10s
//	sqlite:///abs/path/file.db?queue=NAME&sync=full
//
// sqlite:/path (one slash) is refused: write sqlite:///path or
// sqlite://./path. It is what queue.Open calls for the scheme. All queues opened by URL on
// one file share one DB (with the wall clock and default options), which
// is closed when the last of them is closed.
func OpenURL(ctx context.Context, u *url.URL) (driver.Queue, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("sqlite: open %q: %w: %s", queue.Redact(u.String()), queue.ErrInvalidURL, fmt.Sprintf(format, args...))
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: open %q: %w", queue.Redact(u.String()), err)
	}
	if u.Scheme != Scheme {
		return nil, bad("scheme %q is not %q", u.Scheme, Scheme)
	}
	if err := queue.CheckParams(u, ParamQueue, ParamBusyTimeout, ParamSync); err != nil {
		return nil, fmt.Errorf("sqlite: open: %w", err)
	}
	// sqlite://./rel/x.db puts "." in Host; sqlite:///abs/x.db has none;
	// sqlite:x.db is opaque. sqlite:/abs/x.db (one slash) would be the
	// same file as sqlite:///abs/x.db, but is most often a relative path
	// missing its "//.": a file at the filesystem's root is not a guess
	// to make.
	if u.OmitHost && u.Opaque == "" {
		return nil, bad("the path %q after one slash would be absolute, at the filesystem's root: write sqlite://%s for that file, or sqlite://.%s for a path relative to the working directory (a config's directory for a URL in a config file)", u.Path, u.Path, u.Path)
	}
	path := u.Opaque
	if path == "" {
		path = u.Host + u.Path
	}
	if path == "" || strings.HasSuffix(path, "/") {
		return nil, bad("missing the database file path (sqlite:///abs/path.db or sqlite://./rel/path.db)")
	}
	params := u.Query()
	names := params[ParamQueue]
	switch {
	case len(names) == 0 || names[0] == "":
		return nil, bad("missing the %q parameter (…?%s=NAME)", ParamQueue, ParamQueue)
	case len(names) > 1:
		return nil, bad("parameter %q given %d times", ParamQueue, len(names))
	}
	name := names[0]
	if err := queue.ValidateName(name); err != nil {
		return nil, fmt.Errorf("sqlite: open %q: %w", queue.Redact(u.String()), err)
	}
	var opts []Option
	if vs := params[ParamBusyTimeout]; len(vs) > 0 {
		if len(vs) > 1 {
			return nil, bad("parameter %q given %d times", ParamBusyTimeout, len(vs))
		}
		d, err := time.ParseDuration(vs[0])
		if err != nil || d < time.Millisecond {
			return nil, bad("%s %q is not a duration of at least 1ms (e.g. 10s)", ParamBusyTimeout, vs[0])
		}
		opts = append(opts, WithBusyTimeout(d))
	}
	if vs := params[ParamSync]; len(vs) > 0 {
		if len(vs) > 1 {
			return nil, bad("parameter %q given %d times", ParamSync, len(vs))
		}
		switch vs[0] {
		case SyncNormal.String():
		case SyncFull.String():
			opts = append(opts, WithSync(SyncFull))
		default:
			return nil, bad("%s %q is not %q or %q", ParamSync, vs[0], SyncNormal, SyncFull)
		}
	}

	key, err := canonicalPath(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %q: %w", queue.Redact(u.String()), err)
	}
	db, err := acquire(key, opts)
	if err != nil {
		return nil, err
	}
	q, err := db.queue(name)
	if err != nil {
		_ = release(key)
		return nil, fmt.Errorf("sqlite: open %q: %w", queue.Redact(u.String()), err)
	}
	q.onClose = func() error { return release(key) }
	q.sharedKey = key
	return q, nil
}

// Sibling opens another queue in the same file. A queue opened by URL
// shares the file's DB with its sibling, which holds a reference of its
// own until it is closed.
func (q *driverQueue) Sibling(_ context.Context, name string) (driver.Queue, error) {
	if q.sharedKey == "" {
		return q.db.queue(name)
	}
	db, err := acquire(q.sharedKey, nil)
	if err != nil {
		return nil, err
	}
	s, err := db.queue(name)
	if err != nil {
		_ = release(q.sharedKey)
		return nil, err
	}
	key := q.sharedKey
	s.onClose = func() error { return release(key) }
	s.sharedKey = key
	return s, nil
}

// canonicalPath is the key under which URL opens share a DB: the absolute
// path, with symbolic links in its directory resolved where it exists.
func canonicalPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		abs = filepath.Join(dir, filepath.Base(abs))
	}
	return abs, nil
}

func acquire(key string, opts []Option) (*DB, error) {
	shared.Lock()
	defer shared.Unlock()
	if s, ok := shared.dbs[key]; ok {
		s.refs++
		return s.db, nil
	}
	db, err := Open(key, opts...)
	if err != nil {
		return nil, err
	}
	shared.dbs[key] = &sharedDB{db: db, refs: 1}
	return db, nil
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
