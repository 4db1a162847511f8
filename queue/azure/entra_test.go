package azure_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/queuetest"
)

// entraSeq makes queue names unique within a run and across runs
// (-count=2 reuses nothing).
var entraSeq atomic.Int64

func entraName(prefix string) string {
	return fmt.Sprintf("%s-%s-%d", prefix, strconv.FormatInt(time.Now().UnixNano()%(1<<40), 36), entraSeq.Add(1))
}

// entraAccount is an account on srv (Azurite over HTTPS with --oauth
// basic) that authorizes with cred's tokens alone: no key, no SAS.
func entraAccount(t testing.TB, srv *azuritetest.Server, cred *azuritetest.TokenCredential, cfg azure.Config) *azure.Account {
	t.Helper()
	cfg.Credential = cred
	cfg.HTTPClient = srv.HTTPClient()
	return newAccount(t, srv, cfg)
}

// TestEntra runs the driver over HTTPS with Microsoft Entra ID bearer
// tokens against Azurite started with a certificate made for it and
// --oauth basic, which checks each token's lifetime, issuer and
// audience: the whole conformance suite, claim-check, and the errors a
// refused token and a failing credential give.
func TestEntra(t *testing.T) {
	// The binary's shared HTTPS Azurite (ExampleConfig_credential's too),
	// loading while the serial tests run.
	oauth := azuritetest.Options{OAuth: true}
	go func() { _, _ = azuritetest.SharedServerWith(oauth) }()
	t.Parallel()
	srv := azuritetest.SharedWith(t, oauth)

	t.Run("Conformance", func(t *testing.T) {
		cred := &azuritetest.TokenCredential{}
		t.Cleanup(func() { // after the parallel cases
			if cred.Calls() == 0 {
				t.Error("the suite ran without asking the credential for a token")
			}
		})
		queuetest.Run(t, func(t *testing.T) *queuetest.Harness {
			t.Parallel()
			var mu sync.Mutex
			acct := entraAccount(t, srv, cred, azure.Config{})
			return &queuetest.Harness{
				NewQueue: func(ctx context.Context, name string) (*queue.Queue, error) {
					mu.Lock()
					a := acct
					mu.Unlock()
					return a.Queue(ctx, name)
				},
				Reopen: func(context.Context) error {
					mu.Lock()
					defer mu.Unlock()
					if err := acct.Close(); err != nil {
						return err
					}
					acct = entraAccount(t, srv, cred, azure.Config{})
					return nil
				},
				Features: driver.Features{
					MaxPeek: queue.MaxPeek, MaxBody: azure.DefaultMaxBodySize, Siblings: true,
					Durability: driver.Replicated, Billed: true, TimeResolution: time.Second, Metadata: claimCheckMetadata(),
				},
				// TestConformance drains 1,000 over shared key; this
				// proves the token path under 8 consumers' concurrent
				// requests (some 300 Gets and Deletes overlapping), each
				// authorized from the one credential's cached token.
				ConcurrencyMessages: 256,
			}
		})
	})

	t.Run("ClaimCheck", func(t *testing.T) {
		t.Parallel()
		cred := &azuritetest.TokenCredential{}
		container := entraName("payloads")
		acct := entraAccount(t, srv, cred, azure.Config{Container: container})
		name := entraName("entra-claim")
		q := openQueue(t, acct, name)
		body := randomBody(1 << 20)
		id, err := q.Put(ctx, body, queue.PutOptions{TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		stored := entraBlobs(t, srv, container, name+"/")
		if len(stored) != 1 {
			t.Fatalf("payload blobs = %v, want one (written with a token)", stored)
		}
		ms, err := q.Get(ctx, 1, time.Minute)
		if err != nil || len(ms) != 1 {
			t.Fatalf("Get: %d messages, %v", len(ms), err)
		}
		if ms[0].ID != id || !bytes.Equal(ms[0].Body, body) {
			t.Fatal("Get did not return the 1 MiB body exactly (read with a token)")
		}
		if err := q.Delete(ctx, ms[0].ID, ms[0].PopReceipt); err != nil {
			t.Fatal(err)
		}
		if left := entraBlobs(t, srv, container, name+"/"); len(left) != 0 {
			t.Fatalf("payload blobs after Delete = %v, want none (deleted with a token)", left)
		}
		if cred.Calls() == 0 {
			t.Fatal("no token was asked for")
		}
	})

	t.Run("WrongAudience", func(t *testing.T) {
		t.Parallel()
		cred := &azuritetest.TokenCredential{Audience: "https://management.azure.com"}
		acct := entraAccount(t, srv, cred, azure.Config{})
		_, err := acct.Queue(ctx, entraName("entra-audience"))
		if err == nil {
			t.Fatal("a token for another audience opened a queue")
		}
		if !errors.Is(err, azure.ErrAuth) || queue.IsTransient(err) {
			t.Errorf("error %v: want azure.ErrAuth, not transient", err)
		}
		var e *azure.Error
		if !errors.As(err, &e) || e.StatusCode != 403 || e.Code != "AuthenticationFailed" {
			t.Fatalf("error %v: want an *azure.Error with 403 AuthenticationFailed", err)
		}
		for _, want := range []string{"Invalid token audience", "another audience", "https://storage.azure.com", "Config.Credential (*azuritetest.TokenCredential)"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		assertNoToken(t, err, cred)
	})

	t.Run("WrongIssuer", func(t *testing.T) {
		t.Parallel()
		cred := &azuritetest.TokenCredential{Issuer: "https://login.example.com/tenant/"}
		acct := entraAccount(t, srv, cred, azure.Config{})
		_, err := acct.Queue(ctx, entraName("entra-issuer"))
		if !errors.Is(err, azure.ErrAuth) || !strings.Contains(err.Error(), "Invalid token issuer") || !strings.Contains(err.Error(), "another tenant") {
			t.Fatalf("error %v: want azure.ErrAuth saying the issuer is wrong", err)
		}
		assertNoToken(t, err, cred)
	})

	t.Run("FailingCredential", func(t *testing.T) {
		t.Parallel()
		testFailingCredential(t, srv)
	})

	t.Run("TransientCredentialFailure", func(t *testing.T) {
		t.Parallel()
		timeout := &net.OpError{Op: "dial", Net: "tcp", Err: timeoutError{}}
		cred := &azuritetest.TokenCredential{Fail: func(int64) error {
			return fmt.Errorf("ManagedIdentityCredential: IMDS did not answer: %w", timeout)
		}}
		acct := entraAccount(t, srv, cred, azure.Config{})
		_, err := acct.Queue(ctx, entraName("entra-transient"))
		var ce *azure.CredentialError
		if !errors.As(err, &ce) || !queue.IsTransient(err) || !errors.Is(err, azure.ErrAuth) {
			t.Fatalf("error %v: want a transient *azure.CredentialError", err)
		}
	})
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// errNoTokenSource is what azidentity's DefaultAzureCredential says when
// it finds no way to get a token (its text, abridged).
var errNoTokenSource = errors.New("DefaultAzureCredential: failed to acquire a token.\nAttempted credentials:\n" +
	"\tEnvironmentCredential: missing environment variable AZURE_TENANT_ID\n" +
	"\tManagedIdentityCredential: no response from the IMDS endpoint\n" +
	"\tAzureCLICredential: Azure CLI not found on path")

// testFailingCredential: a credential that cannot get a token gives an
// error naming it and saying why, not transient; the listener retries its
// gets through it and handles every message once the credential works
// again.
func testFailingCredential(t *testing.T, srv *azuritetest.Server) {
	var failing atomic.Bool
	const failures = 3
	var failed atomic.Int64
	cred := &azuritetest.TokenCredential{
		// Short-lived tokens: once the last expired, every request asks
		// for a new one.
		Lifetime: 5 * time.Second,
		Fail: func(int64) error {
			if !failing.Load() {
				return nil
			}
			if failed.Add(1) >= failures {
				failing.Store(false)
			}
			return errNoTokenSource
		},
	}
	acct := entraAccount(t, srv, cred, azure.Config{})
	name := entraName("entra-failing")
	q := openQueue(t, acct, name)
	// Filled through an account of its own, with long-lived tokens: on a
	// busy machine the puts may take longer than the short lifetime.
	ids := fill(t, openQueue(t, entraAccount(t, srv, &azuritetest.TokenCredential{}, azure.Config{}), name), 50)

	failing.Store(true)
	time.Sleep(5500 * time.Millisecond) // the last token expires
	_, err := q.Get(ctx, 1, time.Minute)
	var ce *azure.CredentialError
	if !errors.As(err, &ce) {
		t.Fatalf("Get with a failing credential: %v, want a *azure.CredentialError", err)
	}
	if !errors.Is(err, azure.ErrAuth) || queue.IsTransient(err) {
		t.Errorf("error %v: want azure.ErrAuth, not transient (no token source: the setup must change)", err)
	}
	msg := err.Error()
	for _, want := range []string{"Config.Credential (*azuritetest.TokenCredential)", azure.TokenScope,
		"EnvironmentCredential: missing environment variable AZURE_TENANT_ID", "no response from the IMDS endpoint"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error %q spans lines", msg)
	}
	assertNoToken(t, err, cred)

	h := &handled{runs: map[string]int{}}
	opts := listenerOptions(30 * time.Second)
	opts.Tasks, opts.MinTasks, opts.MaxTasks = 1, 1, 1
	l, err := listener.New(q, h.handle, opts)
	if err != nil {
		t.Fatal(err)
	}
	runUntil(t, l, func() bool { return h.missing(ids) == 0 && l.Stats().Deleted >= int64(len(ids)) })
	st := l.Stats()
	if st.GetErrors < 1 || st.TransientErrors != 0 {
		t.Errorf("listener stats %+v: want failed gets, none transient, retried", st)
	}
	if failing.Load() {
		t.Error("the credential never recovered")
	}
}

// assertNoToken fails if err's text holds a token cred minted.
func assertNoToken(t *testing.T, err error, cred *azuritetest.TokenCredential) {
	t.Helper()
	tok := cred.LastToken()
	if err == nil || tok == "" {
		return
	}
	_, sig, _ := strings.Cut(tok, ".")
	if strings.Contains(err.Error(), tok) || strings.Contains(err.Error(), sig) || strings.Contains(err.Error(), "Bearer ") {
		t.Errorf("error %q carries the token", err)
	}
}

// entraBlobs lists blob names under prefix in a container on srv, with a
// token (the SDK's own client).
func entraBlobs(t *testing.T, srv *azuritetest.Server, containerName, prefix string) []string {
	t.Helper()
	c, err := container.NewClient(srv.BlobEndpoint+"/"+containerName, &azuritetest.TokenCredential{},
		&container.ClientOptions{ClientOptions: policy.ClientOptions{Transport: srv.HTTPClient(), Retry: policy.RetryOptions{MaxRetries: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	p := c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: to.Ptr(prefix)})
	var names []string
	for p.More() {
		page, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Segment.BlobItems {
			names = append(names, *it.Name)
		}
	}
	return names
}
