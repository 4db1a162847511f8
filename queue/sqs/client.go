package sqs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials/ec2rolecreds"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.uber.org/zap"

	"github.com/adaptq/adaptq/queue"
)

// Defaults. Each says where its number comes from.
const (
	// DefaultTimeout bounds each request but a long poll (which gets its
	// wait on top), so a connection that hangs fails, transiently,
	// instead of holding a caller forever. The SDK sets none.
	DefaultTimeout = 30 * time.Second
	// DefaultMaxIdleConns is how many idle connections to the endpoint
	// are kept: enough for 16 tasks each deleting in parallel.
	DefaultMaxIdleConns = 256
	// DefaultIdleConnTimeout closes a connection idle this long: below the
	// 5 s keep-alive of Node's HTTP server (the emulator), so the client
	// closes an idle connection first and a request never goes out on one
	// the server is closing.
	DefaultIdleConnTimeout = 4 * time.Second
	// CreateRetention is the MessageRetentionPeriod of a queue the driver
	// creates: SQS's maximum, 14 days, so that adaptq's default TTL of 7
	// days holds (SQS's own default is 4 days).
	CreateRetention = 14 * 24 * time.Hour
	// MaxMessageSize is SQS's largest message, attributes included: 1 MiB
	// since August 2025 (256 KiB before), and the MaximumMessageSize of a
	// queue the driver creates.
	MaxMessageSize = 1 << 20
)

// envIMDSDisabled is the SDK's variable that turns the EC2 metadata
// service on or off.
const envIMDSDisabled = "AWS_EC2_METADATA_DISABLED"

// Config describes where the queues are and how to reach them. The zero
// value of each field but Region is a working default.
type Config struct {
	// Region is the AWS region ("eu-west-1").
	Region string
	// Account is the 12-digit AWS account that owns the queues; empty
	// means the account of the credentials.
	Account string
	// Endpoint is SQS's URL for an emulator or LocalStack
	// ("http://127.0.0.1:4566"); empty means AWS's own for the region.
	// With an endpoint the credential chain does not ask the EC2
	// metadata service (instance roles) unless AWS_EC2_METADATA_DISABLED
	// is set to false, and a chain that finds nothing else fails
	// NewClient with ErrNoCredentials.
	Endpoint string
	// Profile is the shared-config profile the standard credential chain
	// reads (default: $AWS_PROFILE, else "default").
	Profile string
	// Credentials, if set, replaces the standard chain (environment,
	// shared files, SSO, web identity, ECS and EC2 roles).
	Credentials aws.CredentialsProvider
	// Anonymous sends unsigned requests (emulators that need no
	// credentials).
	Anonymous bool
	// NoCreate makes opening a queue that does not exist fail with
	// ErrQueueNotFound; by default it is created (with CreateRetention
	// and MaxMessageSize).
	NoCreate bool
	// Timeout bounds each request (default DefaultTimeout; negative:
	// none). A long poll gets its wait on top.
	Timeout time.Duration
	// HTTPClient sends the requests (default: the SDK's, with
	// DefaultMaxIdleConns idle connections, honouring AWS_CA_BUNDLE).
	HTTPClient *http.Client
	// Logger receives debug events and warnings; never a credential.
	// Default: none.
	Logger *zap.Logger
	// Clock is this process's clock (default: the system's), injected by
	// tests to run it ahead of or behind SQS's. It dates
	// Message.NextVisibleAt and decides nothing: expiry is judged by SQS's
	// clock.
	Clock queue.Clock
}

func (c Config) withDefaults() (Config, error) {
	if c.Region == "" {
		return c, fmt.Errorf("%w: no region", queue.ErrInvalidArgument)
	}
	if !validLabel(c.Region) {
		return c, fmt.Errorf("%w: region %q: want lowercase letters, digits and hyphens", queue.ErrInvalidArgument, c.Region)
	}
	if c.Account != "" && !validAccount(c.Account) {
		return c, fmt.Errorf("%w: account %q: want 12 digits", queue.ErrInvalidArgument, c.Account)
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" {
			return c, fmt.Errorf("%w: endpoint %q is not an http(s) URL without credentials or query", queue.ErrInvalidArgument, queue.Redact(c.Endpoint))
		}
	}
	if c.Anonymous && c.Credentials != nil {
		return c, fmt.Errorf("%w: both anonymous and credentials given", queue.ErrInvalidArgument)
	}
	switch {
	case c.Timeout == 0:
		c.Timeout = DefaultTimeout
	case c.Timeout < 0:
		c.Timeout = 0
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Clock == nil {
		c.Clock = queue.SystemClock{}
	}
	return c, nil
}

func validLabel(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func validAccount(s string) bool {
	if len(s) != 12 {
		return false
	}
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

// Client is SQS in one region and account, shared by the queues opened on
// it. It is safe for concurrent use.
type Client struct {
	cfg       Config
	api       *awssqs.Client
	closeIdle func() // closes the driver's own client's idle connections
	closed    atomic.Bool
	refs      atomic.Int32 // queues opened by URL that share the client
}

// NewClient resolves the credentials' chain (without a request) and
// prepares the SDK client, with its retries off: the caller's backoff (the
// listener's) is the only retry policy, and the cost meter sees every
// attempt.
func NewClient(ctx context.Context, cfg Config) (*Client, error) {
	return newClient(ctx, cfg, DefaultIdleConnTimeout)
}

// newClient is NewClient with the idle timeout of the driver's own
// transport (tests set a long one).
func newClient(ctx context.Context, cfg Config, idle time.Duration) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("sqs: %w", err)
	}
	c := &Client{cfg: cfg}
	opts := []func(*config.LoadOptions) error{
		config.WithRegion(cfg.Region),
		config.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }),
	}
	if cfg.HTTPClient == nil {
		// The SDK's buildable client, so that the chain's settings that
		// need the transport (AWS_CA_BUNDLE) still apply.
		opts = append(opts, config.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
			t.MaxIdleConns = DefaultMaxIdleConns
			t.MaxIdleConnsPerHost = DefaultMaxIdleConns
			t.IdleConnTimeout = idle
		})))
	}
	if cfg.Profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(cfg.Profile))
	}
	// With an endpoint override (an emulator, LocalStack) the chain's last
	// resort, the EC2 metadata service at 169.254.169.254, is not asked:
	// off an EC2 instance it is traffic off this machine, and a wait, for
	// credentials an emulator does not check. AWS_EC2_METADATA_DISABLED
	// set either way is the SDK's to obey (false: an instance role through
	// a VPC endpoint).
	imdsOff := cfg.Endpoint != "" && os.Getenv(envIMDSDisabled) == ""
	if imdsOff {
		opts = append(opts, config.WithEC2IMDSClientEnableState(imds.ClientDisabled))
	}
	switch {
	case cfg.Anonymous:
		opts = append(opts, config.WithCredentialsProvider(aws.AnonymousCredentials{}))
	case cfg.Credentials != nil:
		opts = append(opts, config.WithCredentialsProvider(cfg.Credentials))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		// The SDK's text names files and profiles, never a secret.
		return nil, fmt.Errorf("sqs: %w: loading the AWS configuration: %v", queue.ErrInvalidArgument, err)
	}
	if imdsOff && !cfg.Anonymous && cfg.Credentials == nil && aws.IsCredentialsProvider(awsCfg.Credentials, (*ec2rolecreds.Provider)(nil)) {
		// The chain found nothing before the metadata service: say so
		// now, without a request, instead of a signing error at the
		// first call.
		return nil, fmt.Errorf("sqs: %w: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (any value for an emulator), or AWS_PROFILE (or profile=) naming a profile with credentials, or give anonymous=true for an emulator that checks none (with endpoint= the EC2 metadata service is not asked; %s=false asks it)", ErrNoCredentials, envIMDSDisabled)
	}
	// The SDK's BuildableClient hands out copies of its transport and
	// builds another, its own, when it first sends; SQS's client clones it
	// again. Closing the idle connections of any copy closes none of the
	// connections in use. So the driver takes the transport as the chain
	// configured it (AWS_CA_BUNDLE …) and sends on it itself: the one
	// Close closes.
	var own *http.Client
	if cfg.HTTPClient == nil {
		b, ok := awsCfg.HTTPClient.(*awshttp.BuildableClient)
		if !ok {
			return nil, fmt.Errorf("sqs: the AWS configuration's HTTP client is a %T, not the SDK's buildable client the driver set", awsCfg.HTTPClient)
		}
		tr := b.GetTransport()
		own = &http.Client{
			Transport: tr,
			// SQS answers no request with a redirect; one is an answer,
			// never followed (a credential must not go elsewhere).
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
		c.closeIdle = tr.CloseIdleConnections
	}
	c.api = awssqs.NewFromConfig(awsCfg, func(o *awssqs.Options) {
		o.Retryer = aws.NopRetryer{}
		if own != nil {
			o.HTTPClient = own
		} else {
			o.HTTPClient = cfg.HTTPClient // the caller's to close
		}
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
	})
	return c, nil
}

// Config returns the configuration with defaults filled in and the
// credentials provider removed.
func (c *Client) Config() Config {
	cfg := c.cfg
	cfg.Credentials = nil
	return cfg
}

// API is the SDK's client, for what the driver does not do.
func (c *Client) API() *awssqs.Client { return c.api }

// Close closes the client's idle connections; every call of a queue opened
// on it then returns queue.ErrClosed without a request (calls already
// under way finish). Closing twice is a no-op.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	if c.closeIdle != nil {
		c.closeIdle()
	}
	return nil
}

func (c *Client) release() error {
	if c.refs.Add(-1) > 0 {
		return nil
	}
	return c.Close()
}

// ctx bounds one request by the client's timeout (plus extra, for a long
// poll's wait).
func (c *Client) ctx(ctx context.Context, extra time.Duration) (context.Context, context.CancelFunc) {
	if c.cfg.Timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.cfg.Timeout+extra)
}

// sending bounds a request that changes a queue (send, delete, visibility
// change, purge) by the client's timeout, once the caller's context allows
// it to start, but not by the caller's cancel: SQS acts on a request it
// received whether or not its client still listens, so a call that
// abandoned its request when its caller gave up would return an error and
// act afterwards. The request runs to its answer and the call returns what
// it did. Without a timeout (Timeout negative) it is the caller's context.
func (c *Client) sending(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err // nothing sent
	}
	if c.cfg.Timeout <= 0 {
		return ctx, func() {}, nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.Timeout)
	return rctx, cancel, nil
}

// Queue opens the queue called name, creating it unless Config.NoCreate.
// opts configure the handle as in queue.New (a meter, a wrapper).
func (c *Client) Queue(ctx context.Context, name string, opts ...queue.Option) (*queue.Queue, error) {
	d, err := c.open(ctx, name)
	if err != nil {
		return nil, err
	}
	return queue.New(d, opts...), nil
}

// open finds (or creates) the queue and reads the attributes the driver
// depends on.
func (c *Client) open(ctx context.Context, name string) (*Queue, error) {
	if err := queue.ValidateName(name); err != nil {
		return nil, fmt.Errorf("sqs: open: %w", err)
	}
	if c.closed.Load() {
		return nil, fmt.Errorf("sqs: open %q: %w", name, queue.ErrClosed)
	}
	fail := func(err error) (*Queue, error) {
		return nil, fmt.Errorf("sqs: open %q: %w", name, err)
	}
	rctx, cancel := c.ctx(ctx, 0)
	defer cancel()
	in := &awssqs.GetQueueUrlInput{QueueName: aws.String(name)}
	if c.cfg.Account != "" {
		in.QueueOwnerAWSAccountId = aws.String(c.cfg.Account)
	}
	var qurl string
	out, err := c.api.GetQueueUrl(rctx, in)
	err = classify(rctx, "GetQueueUrl", name, err)
	switch {
	case err == nil:
		qurl = aws.ToString(out.QueueUrl)
	case errors.Is(err, ErrQueueNotFound) && !c.cfg.NoCreate:
		cout, cerr := c.api.CreateQueue(rctx, &awssqs.CreateQueueInput{
			QueueName: aws.String(name),
			Attributes: map[string]string{
				string(types.QueueAttributeNameMessageRetentionPeriod): strconv.Itoa(int(CreateRetention / time.Second)),
				string(types.QueueAttributeNameMaximumMessageSize):     strconv.Itoa(MaxMessageSize),
			},
		})
		if cerr != nil {
			cerr = classify(rctx, "CreateQueue", name, cerr)
			var e *Error
			if !errors.As(cerr, &e) || !hasCode(e.Code, []string{"QueueNameExists", "QueueAlreadyExists"}) {
				return fail(cerr)
			}
			// Created meanwhile by another process, with other
			// attributes: use it as it is.
			if out, err = c.api.GetQueueUrl(rctx, in); err != nil {
				return fail(classify(rctx, "GetQueueUrl", name, err))
			}
			qurl = aws.ToString(out.QueueUrl)
		} else {
			qurl = aws.ToString(cout.QueueUrl)
		}
	case errors.Is(err, ErrQueueNotFound):
		return fail(fmt.Errorf("%w (create=false: create it first, or allow the driver to)", err))
	default:
		return fail(err)
	}
	q := newQueue(c, name, qurl)
	aout, err := c.api.GetQueueAttributes(rctx, &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(qurl),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameMaximumMessageSize,
			types.QueueAttributeNameRedrivePolicy,
			types.QueueAttributeNameReceiveMessageWaitTimeSeconds,
		},
	})
	if err != nil {
		return fail(classify(rctx, "GetQueueAttributes", name, err))
	}
	a := aout.Attributes
	if n, err := strconv.Atoi(a[string(types.QueueAttributeNameMaximumMessageSize)]); err == nil && n > 0 {
		q.maxMessage = n
	}
	q.redrive = a[string(types.QueueAttributeNameRedrivePolicy)]
	if w := a[string(types.QueueAttributeNameReceiveMessageWaitTimeSeconds)]; w != "" && w != "0" {
		// SQS omits WaitTimeSeconds=0 from a request, so the queue's
		// default applies and every Get would be a long poll.
		c.cfg.Logger.Warn("sqs: the queue has ReceiveMessageWaitTimeSeconds set: every get waits that long on an empty queue; set it to 0",
			zap.String("queue", name), zap.String("wait_seconds", w))
	}
	return q, nil
}
