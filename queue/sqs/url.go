package sqs

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// Scheme is the URL scheme this package registers with queue.Register.
const Scheme = "sqs"

// URL query parameters. Credentials never go in a URL: they come from the
// standard AWS chain (environment, shared files, SSO, roles).
const (
	// ParamEndpoint is SQS's URL for an emulator or LocalStack (default:
	// AWS's own for the region).
	ParamEndpoint = "endpoint"
	// ParamProfile is the shared-config profile the credential chain
	// reads.
	ParamProfile = "profile"
	// ParamAnonymous (anonymous=true) sends unsigned requests, for
	// emulators that need no credentials.
	ParamAnonymous = "anonymous"
	// ParamCreate (default true) creates a missing queue; create=false
	// makes it an error.
	ParamCreate = "create"
	// ParamTimeout bounds each request, as a Go duration (default 30s).
	ParamTimeout = "timeout"
)

var allParams = []string{ParamEndpoint, ParamProfile, ParamAnonymous, ParamCreate, ParamTimeout}

func init() {
	queue.Register(Scheme, queue.OpenerFunc(OpenURL))
}

// OpenURL opens the queue an sqs:// URL names, creating it unless
// create=false:
//
//	sqs://REGION/ACCOUNT/QUEUE[?param=value&…]
//	sqs://REGION/QUEUE[?…]                 (the account of the credentials)
//
// for example
//
//	sqs://eu-west-1/123456789012/orders
//	sqs://us-east-1/000000000000/orders?endpoint=http://127.0.0.1:4566
//
// Parameters are the Param constants; any other is queue.ErrInvalidURL
// naming it. It is what queue.Open calls for the scheme. The queue owns its
// Client (and the siblings it opens share it).
func OpenURL(ctx context.Context, u *url.URL) (driver.Queue, error) {
	cfg, name, err := ConfigFromURL(u)
	if err != nil {
		return nil, err
	}
	c, err := NewClient(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("sqs: open %q: %w", queue.Redact(u.String()), err)
	}
	c.refs.Store(1)
	q, err := c.open(ctx, name)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	q.onClose = c.release
	return q, nil
}

// ConfigFromURL reads an sqs:// URL into a Config and the queue's name
// (see OpenURL).
func ConfigFromURL(u *url.URL) (Config, string, error) {
	raw := queue.Redact(u.String())
	bad := func(format string, args ...any) (Config, string, error) {
		return Config{}, "", fmt.Errorf("sqs: open %q: %w: %s", raw, queue.ErrInvalidURL, fmt.Sprintf(format, args...))
	}
	if u.Scheme != Scheme {
		return bad("scheme %q is not %q", u.Scheme, Scheme)
	}
	if u.Opaque != "" {
		return bad("want sqs://REGION/ACCOUNT/QUEUE")
	}
	if u.User != nil {
		return bad("credentials do not go in the URL (they come from the AWS credential chain: environment, shared files, roles)")
	}
	if u.Port() != "" {
		return bad("the host is the region, not a server (give the server as endpoint=)")
	}
	if err := queue.CheckParams(u, allParams...); err != nil {
		return Config{}, "", fmt.Errorf("sqs: open: %w", err)
	}
	p := map[string]string{}
	for k, vs := range u.Query() {
		if len(vs) > 1 {
			return bad("parameter %q given %d times", k, len(vs))
		}
		p[k] = vs[0]
	}
	cfg := Config{Region: u.Hostname()}
	if cfg.Region == "" {
		return bad("missing the region (sqs://REGION/ACCOUNT/QUEUE)")
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	var name string
	switch len(parts) {
	case 1:
		name = parts[0]
	case 2:
		cfg.Account, name = parts[0], parts[1]
	default:
		return bad("path %q is not ACCOUNT/QUEUE", u.Path)
	}
	if name == "" {
		return bad("missing the queue name (sqs://REGION/ACCOUNT/QUEUE)")
	}
	if err := queue.ValidateName(name); err != nil {
		return Config{}, "", fmt.Errorf("sqs: open %q: %w", raw, err)
	}
	cfg.Endpoint = p[ParamEndpoint]
	cfg.Profile = p[ParamProfile]
	boolParam := func(k string) (bool, bool, error) {
		v, ok := p[k]
		if !ok || v == "" {
			return false, false, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, false, fmt.Errorf("%s=%q is not true or false", k, v)
		}
		return b, true, nil
	}
	if b, _, err := boolParam(ParamAnonymous); err != nil {
		return bad("%v", err)
	} else {
		cfg.Anonymous = b
	}
	if b, ok, err := boolParam(ParamCreate); err != nil {
		return bad("%v", err)
	} else if ok {
		cfg.NoCreate = !b
	}
	if v := p[ParamTimeout]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return bad("%s=%q is not a positive Go duration (e.g. 30s)", ParamTimeout, v)
		}
		cfg.Timeout = d
	}
	if _, err := cfg.withDefaults(); err != nil {
		return bad("%v", err)
	}
	return cfg, name, nil
}
