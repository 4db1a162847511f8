package azure

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"go.uber.org/zap"

	"github.com/adaptq/adaptq/queue"
)

// Azurite's well-known development account. The key is published in
// Azure's documentation and works only against the emulator.
const (
	DevAccount       = "devstoreaccount1"
	DevKey           = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
	DevQueueEndpoint = "http://127.0.0.1:10001/" + DevAccount
	DevBlobEndpoint  = "http://127.0.0.1:10000/" + DevAccount
)

// Defaults. Each says where its number comes from.
const (
	// DefaultConnectionStringEnv is the environment variable read for a
	// connection string when a URL names no credential (the variable the
	// Azure CLI, Functions and the SDKs' samples use).
	DefaultConnectionStringEnv = "AZURE_STORAGE_CONNECTION_STRING"
	// DefaultEndpointSuffix is public Azure's storage DNS suffix.
	DefaultEndpointSuffix = "core.windows.net"
	// DefaultContainer is the blob container claim-check payloads go to.
	DefaultContainer = "adaptq-payloads"
	// DefaultMaxBodySize is the largest body Put accepts with claim-check:
	// 64 MiB, a thousand times Azure's 64 KiB message, small enough to
	// hold in memory and to upload in one request (a block blob takes up
	// to 5,000 MiB in one Put Blob).
	DefaultMaxBodySize = 64 << 20
	// DefaultTimeout bounds each HTTP request, so a connection that hangs
	// fails (transiently) instead of holding a caller forever. The Azure
	// SDK sets none by default; Azure's own server timeout for queue
	// operations is 30 s.
	DefaultTimeout = 30 * time.Second
	// DefaultSweepInterval is how often a queue handle that has seen
	// claim-check payloads deletes expired ones.
	DefaultSweepInterval = time.Hour
	// DefaultPayloadGrace is how long after its message's expiry a payload
	// is kept before the sweep deletes it. Both times are the storage
	// service's, but the payload is created before its message is put
	// (the upload and the put: a minute at most under DefaultTimeout, see
	// ClearGrace), and the blob and queue services keep clocks of their
	// own: an hour is ample room for both.
	DefaultPayloadGrace = time.Hour
	// DefaultMaxIdleConns is how many idle connections to one storage
	// endpoint are kept for reuse: enough for 16 tasks each deleting a
	// batch of 32 in parallel without reconnecting.
	DefaultMaxIdleConns = 256
	// DefaultIdleConnTimeout closes a connection idle this long. It is
	// below the 5 s keep-alive of Node's HTTP server (Azurite) and far
	// below Azure's, so the client closes an idle connection first and a
	// request never goes out on one the server is closing (which fails a
	// non-idempotent call such as a Delete for nothing).
	DefaultIdleConnTimeout = 4 * time.Second
	// ClearGrace is how old a claim-check payload must be, by the blob
	// service's clock, for Clear to delete it: a Put writes the payload
	// first and then puts its message, so a payload younger than that may
	// belong to a message still on its way, which would arrive after the
	// Clear without its body. The two requests are one try each, bounded
	// by Config.Timeout (DefaultTimeout, 30 s: a minute for both); ten
	// minutes leaves room for a producer stalled between them (a GC
	// pause, a suspended VM, a machine too busy to schedule it) and for
	// the skew between the blob and queue services' clocks. A longer
	// Config.Timeout raises it to twice that timeout. A spared payload
	// whose message the Clear did delete is the sweep's (after its
	// expiry and Config.PayloadGrace).
	ClearGrace = 10 * time.Minute
)

// Config describes an account and how its queues behave. The zero value of
// each field but Account is a working default.
type Config struct {
	// Account is the storage account's name.
	Account string
	// QueueEndpoint is the queue service's URL; default
	// https://ACCOUNT.queue.core.windows.net (for Azurite,
	// http://127.0.0.1:10001/devstoreaccount1).
	QueueEndpoint string
	// BlobEndpoint is the blob service's URL, for claim-check payloads;
	// default https://ACCOUNT.blob.core.windows.net, or derived from a
	// QueueEndpoint of that form, or, for the development account without
	// a QueueEndpoint, Azurite's default. With none, claim-check is off.
	BlobEndpoint string
	// Key is the account's shared key (base64). SAS is a shared access
	// signature token (without the leading '?'), used instead. With
	// neither (and no Credential), the development account uses DevKey;
	// others fail.
	Key, SAS string
	// Credential, used instead of Key or SAS, authorizes every request,
	// to the queue and to the claim-check blobs alike, with Microsoft
	// Entra ID bearer tokens it gives for TokenScope: an azidentity
	// credential (managed identity, workload identity, the Azure CLI's
	// login; auth= in a URL makes one) or any of the caller's. The
	// endpoints must be https. The identity needs a role for each
	// operation (see the package documentation); a failure to get a token
	// is a *CredentialError naming the credential.
	Credential azcore.TokenCredential

	// NoCreate makes opening a queue fail with ErrQueueNotFound when it
	// does not exist, and a claim-check Put fail with ErrContainerNotFound
	// when the container does not; by default both are created.
	NoCreate bool
	// Encoding of bodies as message text (default Base64).
	Encoding Encoding
	// Container for claim-check payloads (default DefaultContainer).
	Container string
	// NoClaimCheck refuses bodies over the inline limit with
	// queue.ErrTooLarge instead of storing them as blobs.
	NoClaimCheck bool
	// MaxBodySize is the largest body Put accepts with claim-check
	// (default DefaultMaxBodySize).
	MaxBodySize int
	// Timeout bounds each HTTP request (default DefaultTimeout; negative:
	// none).
	Timeout time.Duration
	// SweepInterval is how often a queue handle that has put or got a
	// claim-check message sweeps expired payloads (default
	// DefaultSweepInterval; negative: never, call Sweep yourself).
	SweepInterval time.Duration
	// PayloadGrace is how long past its message's expiry a payload is
	// kept (default DefaultPayloadGrace; negative: none).
	PayloadGrace time.Duration

	// HTTPClient sends the requests (default: a client of the driver's
	// own, with DefaultMaxIdleConns idle connections per host).
	HTTPClient *http.Client
	// Logger receives warnings the caller gets no error for (a payload
	// left behind) and debug events; never a credential. Default: none.
	Logger *zap.Logger
}

// withDefaults fills in the defaults and checks the fields.
func (c Config) withDefaults() (Config, error) {
	if c.Account == "" {
		return c, fmt.Errorf("%w: no account name", queue.ErrInvalidArgument)
	}
	if !validAccount(c.Account) {
		return c, fmt.Errorf("%w: account name %q: want 3 to 24 lowercase letters and digits", queue.ErrInvalidArgument, c.Account)
	}
	dev := c.Account == DevAccount
	if c.QueueEndpoint == "" {
		if dev {
			c.QueueEndpoint = DevQueueEndpoint
			if c.BlobEndpoint == "" {
				c.BlobEndpoint = DevBlobEndpoint
			}
		} else {
			c.QueueEndpoint = "https://" + c.Account + ".queue." + DefaultEndpointSuffix
		}
	}
	if c.BlobEndpoint == "" {
		c.BlobEndpoint = deriveBlobEndpoint(c.QueueEndpoint)
	}
	for _, e := range []struct{ name, v string }{{"queue endpoint", c.QueueEndpoint}, {"blob endpoint", c.BlobEndpoint}} {
		if e.v == "" {
			continue
		}
		u, err := url.Parse(e.v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, fmt.Errorf("%w: %s %q is not an http(s) URL", queue.ErrInvalidArgument, e.name, queue.Redact(e.v))
		}
		if u.RawQuery != "" {
			return c, fmt.Errorf("%w: %s %q has a query (give a SAS as Config.SAS / sas=)", queue.ErrInvalidArgument, e.name, queue.Redact(e.v))
		}
	}
	c.QueueEndpoint = strings.TrimRight(c.QueueEndpoint, "/")
	c.BlobEndpoint = strings.TrimRight(c.BlobEndpoint, "/")
	if c.Key != "" && c.SAS != "" {
		return c, fmt.Errorf("%w: both a shared key and a SAS given; use one", queue.ErrInvalidArgument)
	}
	if c.Credential != nil {
		if c.Key != "" || c.SAS != "" {
			return c, fmt.Errorf("%w: both a token credential and a shared key or SAS given; use one", queue.ErrInvalidArgument)
		}
		if err := checkTokenEndpoints(c); err != nil {
			return c, err
		}
	} else if c.Key == "" && c.SAS == "" {
		if !dev {
			return c, fmt.Errorf("%w: no credential for account %q (give a shared key, a SAS or a token credential, or a connection string in $%s)",
				queue.ErrInvalidArgument, c.Account, DefaultConnectionStringEnv)
		}
		c.Key = DevKey
	}
	c.SAS = strings.TrimPrefix(c.SAS, "?")
	if c.Container == "" {
		c.Container = DefaultContainer
	}
	if !validContainer(c.Container) {
		return c, fmt.Errorf("%w: container name %q: want 3 to 63 lowercase letters, digits and single hyphens", queue.ErrInvalidArgument, c.Container)
	}
	if c.MaxBodySize == 0 {
		c.MaxBodySize = DefaultMaxBodySize
	}
	if c.MaxBodySize < 0 {
		return c, fmt.Errorf("%w: max body size %d is negative", queue.ErrInvalidArgument, c.MaxBodySize)
	}
	switch {
	case c.Timeout == 0:
		c.Timeout = DefaultTimeout
	case c.Timeout < 0:
		c.Timeout = 0
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	switch {
	case c.PayloadGrace == 0:
		c.PayloadGrace = DefaultPayloadGrace
	case c.PayloadGrace < 0:
		c.PayloadGrace = 0
	}
	if c.Encoding != Base64 && c.Encoding != Text {
		return c, fmt.Errorf("%w: unknown encoding %d", queue.ErrInvalidArgument, int(c.Encoding))
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c, nil
}

// deriveBlobEndpoint maps https://ACCOUNT.queue.SUFFIX to
// https://ACCOUNT.blob.SUFFIX; other endpoints have no known blob service.
func deriveBlobEndpoint(queueEndpoint string) string {
	u, err := url.Parse(queueEndpoint)
	if err != nil {
		return ""
	}
	host := u.Hostname()
	parts := strings.SplitN(host, ".", 3)
	if len(parts) != 3 || parts[1] != "queue" {
		return ""
	}
	u.Host = parts[0] + ".blob." + parts[2]
	if p := u.Port(); p != "" {
		u.Host = net.JoinHostPort(u.Host, p)
	}
	return u.String()
}

func validAccount(s string) bool {
	if len(s) < 3 || len(s) > 24 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// validContainer applies Azure's container naming rules (the same as a
// queue's).
func validContainer(s string) bool { return queue.ValidateName(s) == nil }

// Account is one storage account's queue (and blob) service, shared by the
// queues opened on it. It is safe for concurrent use.
type Account struct {
	cfg        Config
	svc        *azqueue.ServiceClient
	blobs      *service.Client   // nil: no blob endpoint
	payloads   *container.Client // Config.Container; nil without a blob endpoint
	httpClient *http.Client
	ownClient  bool

	containerMu    sync.Mutex
	containerReady atomic.Bool

	clearGrace time.Duration    // ClearGrace, or twice Config.Timeout if longer
	now        func() time.Time // this host's clock (tests move it)

	closed atomic.Bool
	refs   atomic.Int32 // queues opened by URL that share the account
}

// NewAccount checks cfg and prepares the clients; it makes no request.
func NewAccount(cfg Config) (*Account, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("azure: %w", err)
	}
	a := &Account{cfg: cfg, httpClient: cfg.HTTPClient, clearGrace: max(ClearGrace, 2*cfg.Timeout), now: time.Now}
	if a.httpClient == nil {
		a.httpClient = newHTTPClient()
		a.ownClient = true
	}
	core := azcore.ClientOptions{
		Transport: oneAttempt{a.httpClient},
		// One try: the caller (the listener's backoff) is the only retry
		// policy, and the cost meter sees every attempt.
		Retry: policy.RetryOptions{MaxRetries: -1, TryTimeout: cfg.Timeout},
		// UpdateVisibility sends no message text (see
		// visibilityOnlyPolicy).
		PerCallPolicies: []policy.Policy{visibilityOnlyPolicy{}},
	}
	method := "key"
	var cred azcore.TokenCredential
	switch {
	case cfg.Credential != nil:
		method, cred = "entra", nameCredential(cfg.Credential)
	case cfg.SAS != "":
		method = "sas"
	}
	info := authInfo{method: method, credential: credentialName(cfg), account: cfg.Account}
	qinfo, binfo := info, info
	qinfo.service = "queue"
	binfo.service, binfo.container = "blob", cfg.Container
	qopts := &azqueue.ClientOptions{ClientOptions: withAuthInfo(core, &qinfo)}
	switch {
	case cred != nil:
		a.svc, err = azqueue.NewServiceClient(cfg.QueueEndpoint+"/", cred, qopts)
	case cfg.SAS != "":
		a.svc, err = azqueue.NewServiceClientWithNoCredential(cfg.QueueEndpoint+"/?"+cfg.SAS, qopts)
	default:
		var cred *azqueue.SharedKeyCredential
		cred, err = azqueue.NewSharedKeyCredential(cfg.Account, cfg.Key)
		if err == nil {
			a.svc, err = azqueue.NewServiceClientWithSharedKeyCredential(cfg.QueueEndpoint+"/", cred, qopts)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("azure: account %q: %w: queue client: %s", cfg.Account, queue.ErrInvalidArgument, sanitize(err, cfg))
	}
	if cfg.BlobEndpoint != "" {
		bopts := &service.ClientOptions{ClientOptions: withAuthInfo(core, &binfo)}
		switch {
		case cred != nil:
			a.blobs, err = service.NewClient(cfg.BlobEndpoint+"/", cred, bopts)
		case cfg.SAS != "":
			a.blobs, err = service.NewClientWithNoCredential(cfg.BlobEndpoint+"/?"+cfg.SAS, bopts)
		default:
			var cred *azblob.SharedKeyCredential
			cred, err = azblob.NewSharedKeyCredential(cfg.Account, cfg.Key)
			if err == nil {
				a.blobs, err = service.NewClientWithSharedKeyCredential(cfg.BlobEndpoint+"/", cred, bopts)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("azure: account %q: %w: blob client: %s", cfg.Account, queue.ErrInvalidArgument, sanitize(err, cfg))
		}
		a.payloads = a.blobs.NewContainerClient(cfg.Container)
	}
	return a, nil
}

// sanitize is err's text with the config's secrets cut out, in case an SDK
// error quotes its input.
func sanitize(err error, cfg Config) string {
	s := err.Error()
	for _, secret := range []string{cfg.Key, cfg.SAS} {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "REDACTED")
		}
	}
	return s
}

// oneAttempt sends each Get of messages once. Go's transport sends a GET
// again by itself when a reused connection closes before the answer, but a
// Get of messages is not a read: the first one may have hidden its
// messages and raised their dequeue counts. With a body that is not
// replayable (empty: nothing more goes on the wire) the transport leaves
// it to the caller, who sees a transient error, and the cost meter counts
// every attempt. Other GETs (a payload blob's download, a count) are reads
// and keep the transport's retry.
type oneAttempt struct{ c *http.Client }

func (o oneAttempt) Do(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/messages") && (req.Body == nil || req.Body == http.NoBody) {
		req.Body, req.GetBody, req.ContentLength = emptyBody{}, nil, 0
	}
	return o.c.Do(req)
}

// emptyBody is a request body with nothing in it that the transport cannot
// replay (http.NoBody it can).
type emptyBody struct{}

func (emptyBody) Read([]byte) (int, error) { return 0, io.EOF }
func (emptyBody) Close() error             { return nil }

// newHTTPClient is the driver's own HTTP client: the standard transport
// with room for many idle connections to one host.
func newHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = DefaultMaxIdleConns
	t.MaxIdleConnsPerHost = DefaultMaxIdleConns
	t.IdleConnTimeout = DefaultIdleConnTimeout
	return &http.Client{Transport: t}
}

// Name is the account's name.
func (a *Account) Name() string { return a.cfg.Account }

// Config returns the account's configuration with defaults filled in and
// the key and SAS replaced by "REDACTED" (a Credential is kept: it is
// an object, and printing the Config shows only its address).
func (a *Account) Config() Config {
	c := a.cfg
	if c.Key != "" {
		c.Key = "REDACTED"
	}
	if c.SAS != "" {
		c.SAS = "REDACTED"
	}
	return c
}

// Close closes the account's idle connections; queues opened on it then
// return queue.ErrClosed. Closing twice is a no-op.
func (a *Account) Close() error {
	if a.closed.Swap(true) {
		return nil
	}
	if a.ownClient {
		a.httpClient.CloseIdleConnections()
	}
	return nil
}

// Queue opens the queue called name, creating it if it does not exist
// (unless Config.NoCreate, which makes a missing queue ErrQueueNotFound).
// opts configure the handle as in queue.New (a meter, a wrapper).
func (a *Account) Queue(ctx context.Context, name string, opts ...queue.Option) (*queue.Queue, error) {
	d, err := a.open(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("azure: open %q: %w", name, err)
	}
	return queue.New(d, opts...), nil
}

// open returns the driver of the queue called name. Its errors name
// neither the driver nor the queue: the callers do.
func (a *Account) open(ctx context.Context, name string) (*Queue, error) {
	if err := queue.ValidateName(name); err != nil {
		return nil, err
	}
	if a.closed.Load() {
		return nil, queue.ErrClosed
	}
	q := newQueue(a, name)
	if err := q.ensure(ctx); err != nil {
		return nil, err
	}
	return q, nil
}

// claimCheck reports whether Put stores large bodies as blobs.
func (a *Account) claimCheck() bool { return a.payloads != nil && !a.cfg.NoClaimCheck }

// ensureContainer creates the payload container once, unless NoCreate.
func (a *Account) ensureContainer(ctx context.Context, qname string) error {
	if a.containerReady.Load() {
		return nil
	}
	a.containerMu.Lock()
	defer a.containerMu.Unlock()
	if a.containerReady.Load() {
		return nil
	}
	if a.cfg.NoCreate {
		_, err := a.payloads.GetProperties(ctx, nil)
		if err != nil {
			return classify(ctx, "put", qname, err)
		}
	} else {
		_, err := a.payloads.Create(ctx, nil)
		if err != nil && !hasCode(classify(ctx, "put", qname, err), codeContainerExists) {
			return classify(ctx, "put", qname, err)
		}
	}
	a.containerReady.Store(true)
	return nil
}

// visibilityOnlyKey marks, on a request's context, an Update Message that
// changes only the visibility.
type visibilityOnlyKey struct{}

// visibilityOnlyPolicy sends an Update Message marked visibility-only with
// an empty body. The SDK always sends <MessageText>; Azure (since API
// version 2011-08-18) and Azurite keep the text when the body is empty,
// and UpdateVisibility has no text to send.
type visibilityOnlyPolicy struct{}

func (visibilityOnlyPolicy) Do(req *policy.Request) (*http.Response, error) {
	if req.Raw().Method == http.MethodPut && req.Raw().Context().Value(visibilityOnlyKey{}) != nil {
		if err := req.SetBody(nil, ""); err != nil {
			return nil, err
		}
	}
	return req.Next()
}

// release drops one URL-opened queue's hold on the account, closing it
// with the last.
func (a *Account) release() error {
	if a.refs.Add(-1) > 0 {
		return nil
	}
	return a.Close()
}
