package azuritetest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/adaptq/adaptq/queue/azure/azuritetest"
)

// With OAuth the server serves HTTPS with its own certificate and takes
// the tokens TokenCredential mints, on the queue and the blob service; a
// token for another audience is refused.
func TestOAuthServer(t *testing.T) {
	s := azuritetest.StartWith(t, azuritetest.Options{OAuth: true})
	if !s.TLS || !strings.HasPrefix(s.QueueEndpoint, "https://127.0.0.1:") || !strings.HasPrefix(s.BlobEndpoint, "https://127.0.0.1:") {
		t.Fatalf("endpoints %s, %s: want https on the loopback", s.QueueEndpoint, s.BlobEndpoint)
	}
	ctx := context.Background()
	opts := policy.ClientOptions{Transport: s.HTTPClient(), Retry: policy.RetryOptions{MaxRetries: -1}}
	cred := &azuritetest.TokenCredential{}

	qs, err := azqueue.NewServiceClient(s.QueueEndpoint+"/", cred, &azqueue.ClientOptions{ClientOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qs.CreateQueue(ctx, "oauth-server", nil); err != nil {
		t.Fatalf("create a queue with a token: %v", err)
	}
	if _, err := qs.NewQueueClient("oauth-server").EnqueueMessage(ctx, "hello", nil); err != nil {
		t.Fatalf("put with a token: %v", err)
	}
	bs, err := service.NewClient(s.BlobEndpoint+"/", cred, &service.ClientOptions{ClientOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bs.CreateContainer(ctx, "oauth-server", nil); err != nil {
		t.Fatalf("create a container with a token: %v", err)
	}
	if cred.Calls() == 0 {
		t.Fatal("no token was asked for")
	}

	wrong := &azuritetest.TokenCredential{Audience: "https://management.azure.com"}
	qw, err := azqueue.NewServiceClient(s.QueueEndpoint+"/", wrong, &azqueue.ClientOptions{ClientOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	_, err = qw.CreateQueue(ctx, "oauth-server-wrong", nil)
	if err == nil || !strings.Contains(err.Error(), "AuthenticationFailed") {
		t.Fatalf("a token for another audience: %v, want AuthenticationFailed", err)
	}
	t.Logf("wrong audience: %v", err)
}
