package azure

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// Scheme is the URL scheme this package registers with queue.Register.
const Scheme = "azure"

// URL query parameters. Secrets are best kept out of URLs (key_env,
// sas_env, connection_string_env name environment variables instead);
// key= and sas= work, and queue.Redact hides their values in every error
// and log.
const (
	// ParamEndpoint is the queue service URL (default
	// https://ACCOUNT.queue.core.windows.net).
	ParamEndpoint = "endpoint"
	// ParamBlobEndpoint is the blob service URL for claim-check payloads.
	ParamBlobEndpoint = "blob_endpoint"
	// ParamConnectionStringEnv names the environment variable holding a
	// connection string (default: DefaultConnectionStringEnv, read when
	// no other credential is given).
	ParamConnectionStringEnv = "connection_string_env"
	// ParamKey is the account's shared key; ParamKeyEnv names the
	// environment variable holding it.
	ParamKey    = "key"
	ParamKeyEnv = "key_env"
	// ParamSAS is a SAS token; ParamSASEnv names the environment variable
	// holding it.
	ParamSAS    = "sas"
	ParamSASEnv = "sas_env"
	// ParamAuth is how requests are authorized: key (the default: a
	// shared key, SAS or connection string), entra, managed_identity,
	// workload_identity or azure_cli (Microsoft Entra ID tokens from the
	// SDK's azidentity; see the Auth constants).
	ParamAuth = "auth"
	// ParamClientID is the client id of a user-assigned managed identity
	// (auth=entra or auth=managed_identity) or of the application of a
	// workload identity (auth=workload_identity). Not a secret.
	ParamClientID = "client_id"
	// ParamTenantID is the Entra ID tenant (auth=entra,
	// workload_identity or azure_cli; default: the environment's or the
	// login's).
	ParamTenantID = "tenant_id"
	// ParamDev (dev=true) selects Azurite's development account, its
	// published key and (without endpoint=) its default local endpoints.
	ParamDev = "dev"
	// ParamCreate (default true) creates a missing queue and payload
	// container; create=false makes them errors.
	ParamCreate = "create"
	// ParamEncoding is base64 (default) or text.
	ParamEncoding = "encoding"
	// ParamContainer is the claim-check container (default
	// DefaultContainer).
	ParamContainer = "container"
	// ParamClaimCheck (default true) stores bodies too large for a message
	// as blobs; claim_check=false refuses them with queue.ErrTooLarge.
	ParamClaimCheck = "claim_check"
	// ParamMaxBodySize is the largest body with claim-check, in bytes or
	// with a KiB/MiB/GiB suffix (default 64MiB).
	ParamMaxBodySize = "max_body_size"
	// ParamTimeout bounds each HTTP request, as a Go duration (default
	// 30s).
	ParamTimeout = "timeout"
	// ParamSweepInterval is how often expired payloads are swept, as a Go
	// duration; 0 turns the automatic sweep off (default 1h).
	ParamSweepInterval = "sweep_interval"
	// ParamPayloadGrace is how long past its message's expiry a payload is
	// kept, as a Go duration (default 1h).
	ParamPayloadGrace = "payload_grace"
)

var allParams = []string{
	ParamEndpoint, ParamBlobEndpoint, ParamConnectionStringEnv, ParamKey, ParamKeyEnv, ParamSAS, ParamSASEnv,
	ParamDev, ParamCreate, ParamEncoding, ParamContainer, ParamClaimCheck, ParamMaxBodySize, ParamTimeout,
	ParamSweepInterval, ParamPayloadGrace, ParamAuth, ParamClientID, ParamTenantID,
}

func init() {
	queue.Register(Scheme, queue.OpenerFunc(OpenURL))
}

// OpenURL opens the queue an azure:// URL names, creating it unless
// create=false:
//
//	azure://ACCOUNT/QUEUE[?param=value&…]
//
// for example
//
//	azure://myaccount/orders                       (credential from $AZURE_STORAGE_CONNECTION_STRING)
//	azure://myaccount/orders?key_env=STORAGE_KEY
//	azure://myaccount/orders?sas_env=ORDERS_SAS&create=false
//	azure://myaccount/orders?auth=entra                   (managed identity, workload identity, az login …)
//	azure://myaccount/orders?auth=managed_identity&client_id=CLIENT_ID
//	azure://devstoreaccount1/orders?endpoint=http://127.0.0.1:10001/devstoreaccount1&blob_endpoint=http://127.0.0.1:10000/devstoreaccount1
//	azure:///orders?dev=true                         (Azurite on its default ports)
//
// Parameters are the Param constants; any other is queue.ErrInvalidURL
// naming it. It is what queue.Open calls for the scheme. The queue owns its
// Account (and the siblings it opens share it).
func OpenURL(ctx context.Context, u *url.URL) (driver.Queue, error) {
	cfg, name, err := ConfigFromURL(u)
	if err != nil {
		return nil, err
	}
	a, err := NewAccount(cfg)
	if err != nil {
		return nil, fmt.Errorf("azure: open %q: %w", queue.Redact(u.String()), err)
	}
	a.refs.Store(1)
	q, err := a.open(ctx, name)
	if err != nil {
		_ = a.Close()
		return nil, fmt.Errorf("azure: open %q: %w", name, err)
	}
	q.onClose = a.release
	return q, nil
}

// ConfigFromURL reads an azure:// URL into a Config and the queue's name
// (see OpenURL). Environment variables the URL names are read now.
func ConfigFromURL(u *url.URL) (Config, string, error) {
	raw := queue.Redact(u.String())
	bad := func(format string, args ...any) (Config, string, error) {
		return Config{}, "", fmt.Errorf("azure: open %q: %w: %s", raw, queue.ErrInvalidURL, fmt.Sprintf(format, args...))
	}
	if u.Scheme != Scheme {
		return bad("scheme %q is not %q", u.Scheme, Scheme)
	}
	if u.Opaque != "" {
		return bad("want azure://ACCOUNT/QUEUE")
	}
	if u.User != nil {
		return bad("credentials do not go in the URL's user part (use key_env=, sas_env=, connection_string_env= or auth=)")
	}
	if err := queue.CheckParams(u, allParams...); err != nil {
		return Config{}, "", fmt.Errorf("azure: open: %w", err)
	}
	params := u.Query()
	get := func(k string) (string, error) {
		vs := params[k]
		if len(vs) > 1 {
			return "", fmt.Errorf("parameter %q given %d times", k, len(vs))
		}
		if len(vs) == 0 {
			return "", nil
		}
		return vs[0], nil
	}
	p := map[string]string{}
	for _, k := range allParams {
		v, err := get(k)
		if err != nil {
			return bad("%v", err)
		}
		p[k] = v
	}
	name := strings.TrimPrefix(u.Path, "/")
	if name == "" {
		return bad("missing the queue name (azure://ACCOUNT/QUEUE)")
	}
	if strings.Contains(name, "/") {
		return bad("path %q has more than the queue name (azure://ACCOUNT/QUEUE)", u.Path)
	}
	if err := queue.ValidateName(name); err != nil {
		return Config{}, "", fmt.Errorf("azure: open %q: %w", raw, err)
	}
	if u.Port() != "" {
		return bad("the host is the account name, not a server (give the server as endpoint=)")
	}

	var cfg Config
	account := u.Hostname()
	dev := false
	if v := p[ParamDev]; v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return bad("%s=%q is not true or false", ParamDev, v)
		}
		dev = b
	}
	if dev {
		if account == "" {
			account = DevAccount
		}
		if account != DevAccount {
			return bad("dev=true is Azurite's account %q, not %q", DevAccount, account)
		}
	}
	if account == "" {
		return bad("missing the account name (azure://ACCOUNT/QUEUE)")
	}

	// The credential: at most one way of giving it.
	var ways []string
	for _, k := range []string{ParamKey, ParamKeyEnv, ParamSAS, ParamSASEnv, ParamConnectionStringEnv} {
		if p[k] != "" {
			ways = append(ways, k)
		}
	}
	if dev {
		ways = append(ways, ParamDev)
	}
	auth := p[ParamAuth]
	if auth != "" && auth != AuthKey {
		ways = append(ways, ParamAuth+"="+auth)
	}
	if len(ways) > 1 {
		return bad("give one credential, not %s", strings.Join(ways, " and "))
	}
	if auth == "" || auth == AuthKey {
		for _, k := range []string{ParamClientID, ParamTenantID} {
			if p[k] != "" {
				return bad("%s= is for a Microsoft Entra ID credential (auth=%s, %s …)", k, AuthEntra, AuthManagedIdentity)
			}
		}
	}
	if auth == AuthAzureCLI && p[ParamClientID] != "" {
		return bad("%s= does not apply to auth=%s (it uses the login's identity)", ParamClientID, AuthAzureCLI)
	}
	if auth == AuthManagedIdentity && p[ParamTenantID] != "" {
		return bad("%s= does not apply to auth=%s (the identity's tenant is the host's)", ParamTenantID, AuthManagedIdentity)
	}
	env := func(param string) (string, error) {
		name := p[param]
		v := os.Getenv(name)
		if v == "" {
			return "", fmt.Errorf("%s=%s: the environment variable $%s is not set", param, name, name)
		}
		return v, nil
	}
	var err error
	switch {
	case auth != "" && auth != AuthKey:
		if cfg.Credential, err = newURLCredential(auth, p[ParamClientID], p[ParamTenantID]); err != nil {
			return bad("%v", err)
		}
	case p[ParamKey] != "":
		cfg.Key = p[ParamKey]
	case p[ParamKeyEnv] != "":
		if cfg.Key, err = env(ParamKeyEnv); err != nil {
			return bad("%v", err)
		}
	case p[ParamSAS] != "":
		cfg.SAS = p[ParamSAS]
	case p[ParamSASEnv] != "":
		if cfg.SAS, err = env(ParamSASEnv); err != nil {
			return bad("%v", err)
		}
	case p[ParamConnectionStringEnv] != "":
		s, err := env(ParamConnectionStringEnv)
		if err != nil {
			return bad("%v", err)
		}
		if cfg, err = connConfig(s, account, "$"+p[ParamConnectionStringEnv]); err != nil {
			return bad("%v", err)
		}
	case dev || account == DevAccount:
		cfg.Key = DevKey
	default:
		s := os.Getenv(DefaultConnectionStringEnv)
		if s == "" {
			return bad("no credential for account %q: set $%s to a connection string, or give %s=, %s=, %s= or %s=%s",
				account, DefaultConnectionStringEnv, ParamKeyEnv, ParamSASEnv, ParamConnectionStringEnv, ParamAuth, AuthEntra)
		}
		if cfg, err = connConfig(s, account, "$"+DefaultConnectionStringEnv); err != nil {
			return bad("%v", err)
		}
	}
	cfg.Account = account
	if v := p[ParamEndpoint]; v != "" {
		cfg.QueueEndpoint = v
	}
	if v := p[ParamBlobEndpoint]; v != "" {
		cfg.BlobEndpoint = v
	}
	if v := p[ParamCreate]; v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return bad("%s=%q is not true or false", ParamCreate, v)
		}
		cfg.NoCreate = !b
	}
	if v := p[ParamEncoding]; v != "" {
		e, err := ParseEncoding(v)
		if err != nil {
			return bad("%s: %v", ParamEncoding, err)
		}
		cfg.Encoding = e
	}
	cfg.Container = p[ParamContainer]
	if v := p[ParamClaimCheck]; v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return bad("%s=%q is not true or false", ParamClaimCheck, v)
		}
		cfg.NoClaimCheck = !b
	}
	if v := p[ParamMaxBodySize]; v != "" {
		n, err := parseSize(v)
		if err != nil {
			return bad("%s=%q: %v", ParamMaxBodySize, v, err)
		}
		cfg.MaxBodySize = n
	}
	dur := func(k string, allowZero bool) (time.Duration, bool, error) {
		v := p[k]
		if v == "" {
			return 0, false, nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || (d == 0 && !allowZero) {
			return 0, false, fmt.Errorf("%s=%q is not a positive Go duration (e.g. 30s)", k, v)
		}
		return d, true, nil
	}
	if d, ok, err := dur(ParamTimeout, false); err != nil {
		return bad("%v", err)
	} else if ok {
		cfg.Timeout = d
	}
	if d, ok, err := dur(ParamSweepInterval, true); err != nil {
		return bad("%v", err)
	} else if ok {
		cfg.SweepInterval = d
		if d == 0 {
			cfg.SweepInterval = -1
		}
	}
	if d, ok, err := dur(ParamPayloadGrace, true); err != nil {
		return bad("%v", err)
	} else if ok {
		cfg.PayloadGrace = d
		if d == 0 {
			cfg.PayloadGrace = -1
		}
	}
	if _, err := cfg.withDefaults(); err != nil {
		return bad("%v", err)
	}
	return cfg, name, nil
}

// connConfig parses a connection string for account; from names where it
// came from, for errors.
func connConfig(s, account, from string) (Config, error) {
	c, err := ParseConnectionString(s)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", from, err)
	}
	if c.Account != "" && c.Account != account {
		return Config{}, fmt.Errorf("%s is for account %q, the URL names %q", from, c.Account, account)
	}
	return c, nil
}

// parseSize reads a byte count: 1048576, 512KiB, 64MiB, 1GiB.
func parseSize(s string) (int, error) {
	mult := 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = rest, u.mult
			break
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > (1<<31-1)/mult {
		return 0, fmt.Errorf("not a positive size in bytes (e.g. 1048576 or 64MiB)")
	}
	return n * mult, nil
}
