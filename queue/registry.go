package queue

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"

	"github.com/adaptq/adaptq/queue/driver"
)

// Opener opens a driver's queue from a URL whose scheme it registered for.
type Opener interface {
	OpenQueueURL(ctx context.Context, u *url.URL) (driver.Queue, error)
}

// OpenerFunc adapts a function to Opener.
type OpenerFunc func(ctx context.Context, u *url.URL) (driver.Queue, error)

// OpenQueueURL calls f.
func (f OpenerFunc) OpenQueueURL(ctx context.Context, u *url.URL) (driver.Queue, error) {
	return f(ctx, u)
}

var (
	registryMu sync.RWMutex
	registry   = map[string]Opener{}
)

// Register makes a driver available under a URL scheme. Drivers call it
// from init; it panics if the scheme is taken or o is nil, as
// database/sql.Register does.
func Register(scheme string, o Opener) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if o == nil {
		panic("queue: Register opener is nil")
	}
	if _, dup := registry[scheme]; dup {
		panic("queue: Register called twice for scheme " + scheme)
	}
	registry[scheme] = o
}

// Schemes lists the registered URL schemes, sorted.
func Schemes() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	s := make([]string, 0, len(registry))
	for k := range registry {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// Open opens the queue named by rawURL with the driver registered for its
// scheme, for example memory://orders, sqlite://./data/adaptq.db?queue=orders
// or azure://account/orders. The driver's package must be imported. opts
// configure the Queue as in New.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Queue, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %s", ErrInvalidURL, Redact(rawURL), ParseReason(err))
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("%w %q: no scheme (want one of %s)", ErrInvalidURL, Redact(rawURL), strings.Join(Schemes(), ", "))
	}
	registryMu.RLock()
	o, ok := registry[u.Scheme]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q: unknown scheme %q (registered: %s; is the driver imported?)",
			ErrInvalidURL, Redact(rawURL), u.Scheme, strings.Join(Schemes(), ", "))
	}
	d, err := o.OpenQueueURL(ctx, u)
	if err != nil {
		return nil, err
	}
	return New(d, opts...), nil
}

// secretParams are URL parameters whose values Redact hides.
// RedactText hides them outside URLs too (token=abc in an error's text).
var secretParams = []string{"key", "accountkey", "account_key", "sig", "sas", "token", "password", "secret", "connection_string",
	"signature", "x-amz-signature", "x-amz-credential", "x-amz-security-token", "access_token", "api_key", "apikey",
	"client_secret", "passwd", "pwd", "session_token"}

// isSecretParam reports whether a URL parameter's value is a secret.
func isSecretParam(k string) bool {
	lk := strings.ToLower(k)
	for _, s := range secretParams {
		if lk == s {
			return true
		}
	}
	return false
}

// Redact returns rawURL with any password and secret-looking query values
// replaced by "REDACTED", for error messages and logs.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Opaque != "" {
		// Not a URL we can take apart: show only its scheme, since any
		// part of the rest may be a secret.
		if i := strings.Index(rawURL, "://"); i >= 0 && i < 20 {
			return rawURL[:i+3] + "…"
		}
		if i := strings.IndexAny(rawURL, "?@:/"); i >= 0 {
			return rawURL[:i] + "…"
		}
		return rawURL
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			if isSecretParam(k) {
				q[k] = []string{"REDACTED"}
			}
		}
		c := *u
		c.RawQuery = q.Encode()
		u = &c
	}
	return u.Redacted()
}

// CheckParams returns ErrInvalidURL naming the first query parameter of u
// that is not in allowed.
func CheckParams(u *url.URL, allowed ...string) error {
	q := u.Query()
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		found := false
		for _, a := range allowed {
			if k == a {
				found = true
				break
			}
		}
		if !found {
			if len(allowed) == 0 {
				return fmt.Errorf("%w %q: unknown parameter %q (this scheme takes none)", ErrInvalidURL, Redact(u.String()), k)
			}
			return fmt.Errorf("%w %q: unknown parameter %q (allowed: %s)", ErrInvalidURL, Redact(u.String()), k, strings.Join(allowed, ", "))
		}
	}
	return nil
}
