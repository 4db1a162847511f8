package azure_test

import (
	"errors"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue/sas"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
)

// clearEntraEnv removes the environment azidentity reads, so that the
// cases do not depend on the machine's.
func clearEntraEnv(t *testing.T) {
	for _, k := range []string{"AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_CLIENT_CERTIFICATE_PATH",
		"AZURE_FEDERATED_TOKEN_FILE", "AZURE_TOKEN_CREDENTIALS", "AZURE_AUTHORITY_HOST", "AZURE_STORAGE_CONNECTION_STRING"} {
		t.Setenv(k, "") // restored at the end of the test
		os.Unsetenv(k)
	}
}

// TestAuthURL reads auth= and its companions: each Entra credential kind
// makes a Config with a Credential and no key; mixing credentials, or
// client_id= where it means nothing, or an http endpoint, is an error
// that says so.
func TestAuthURL(t *testing.T) {
	clearEntraEnv(t)
	ok := []string{
		"azure://myaccount/orders?auth=entra",
		"azure://myaccount/orders?auth=entra&tenant_id=00000000-0000-0000-0000-000000000001",
		"azure://myaccount/orders?auth=entra&client_id=00000000-0000-0000-0000-000000000002",
		"azure://myaccount/orders?auth=managed_identity",
		"azure://myaccount/orders?auth=managed_identity&client_id=00000000-0000-0000-0000-000000000002",
		"azure://myaccount/orders?auth=azure_cli&tenant_id=00000000-0000-0000-0000-000000000001",
		"azure://devstoreaccount1/orders?auth=entra&endpoint=https://127.0.0.1:10001/devstoreaccount1",
	}
	for _, raw := range ok {
		u, _ := url.Parse(raw)
		cfg, name, err := azure.ConfigFromURL(u)
		if err != nil {
			t.Errorf("%s: %v", raw, err)
			continue
		}
		if name != "orders" || cfg.Credential == nil || cfg.Key != "" || cfg.SAS != "" {
			t.Errorf("%s: queue %q, credential %v, key set %v, SAS set %v: want a token credential alone",
				raw, name, cfg.Credential, cfg.Key != "", cfg.SAS != "")
		}
		if _, err := azure.NewAccount(cfg); err != nil {
			t.Errorf("%s: NewAccount: %v", raw, err)
		}
	}
	u, _ := url.Parse("azure://myaccount/orders?auth=key&key=" + url.QueryEscape(azuritetest.Key))
	if cfg, _, err := azure.ConfigFromURL(u); err != nil || cfg.Credential != nil || cfg.Key == "" {
		t.Errorf("auth=key with key=: %v, want the shared key", err)
	}

	bad := []struct{ url, says string }{
		{"azure://myaccount/orders?auth=entra&key_env=K", "give one credential"},
		{"azure://myaccount/orders?auth=managed_identity&sas=sv%3D1", "give one credential"},
		{"azure://devstoreaccount1/orders?auth=entra&dev=true", "give one credential"},
		{"azure://myaccount/orders?client_id=abc&key_env=K", "client_id= is for a Microsoft Entra ID credential"},
		{"azure://myaccount/orders?auth=azure_cli&client_id=abc", "does not apply to auth=azure_cli"},
		{"azure://myaccount/orders?auth=managed_identity&tenant_id=abc", "does not apply to auth=managed_identity"},
		{"azure://myaccount/orders?auth=password", `auth="password": want one of key, entra, managed_identity, workload_identity, azure_cli`},
		{"azure://myaccount/orders?auth=workload_identity", "auth=workload_identity"},
		{"azure://myaccount/orders?auth=entra&endpoint=http://127.0.0.1:10001/myaccount", "needs https"},
		{"azure://myaccount/orders?auth=entra&auth=entra", "given 2 times"},
	}
	for _, c := range bad {
		u, _ := url.Parse(c.url)
		_, _, err := azure.ConfigFromURL(u)
		if !errors.Is(err, queue.ErrInvalidURL) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want ErrInvalidURL saying %q", c.url, err, c.says)
		}
	}

	// A Config with a credential and an http endpoint, or with a key too.
	for _, cfg := range []azure.Config{
		{Account: "myaccount", Credential: &azuritetest.TokenCredential{}, QueueEndpoint: "http://127.0.0.1:1/myaccount"},
		{Account: "myaccount", Credential: &azuritetest.TokenCredential{}, Key: azuritetest.Key},
	} {
		if _, err := azure.NewAccount(cfg); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("NewAccount(endpoint %q, key set %v): %v, want ErrInvalidArgument", cfg.QueueEndpoint, cfg.Key != "", err)
		}
	}
}

// TestAuthURLNoTokenSource opens a queue with auth=azure_cli on a machine
// without the Azure CLI: the token is asked for before any connection,
// and the error names the credential and why it has none.
func TestAuthURLNoTokenSource(t *testing.T) {
	clearEntraEnv(t)
	t.Setenv("PATH", t.TempDir()) // no az
	_, err := queue.Open(ctx, "azure://myaccount/"+entraName("no-token")+"?auth=azure_cli&endpoint="+
		url.QueryEscape("https://127.0.0.1:1/myaccount")+"&timeout=5s")
	var ce *azure.CredentialError
	if !errors.As(err, &ce) || !errors.Is(err, azure.ErrAuth) || queue.IsTransient(err) {
		t.Fatalf("open with no Azure CLI: %v, want a permanent *azure.CredentialError", err)
	}
	if ce.Credential != "auth=azure_cli" || !strings.Contains(err.Error(), "AzureCLICredential") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("error %q: want one line naming auth=azure_cli and AzureCLICredential's reason", err)
	}
}

// TestSASPermissionMismatch: Azurite refuses a put with a read-only SAS
// (403 AuthorizationPermissionMismatch); the error is ErrAuth and says
// the SAS lacks the permission.
func TestSASPermissionMismatch(t *testing.T) {
	srv := azuritetest.Shared(t)
	cred, err := azqueue.NewSharedKeyCredential(azuritetest.Account, azuritetest.Key)
	if err != nil {
		t.Fatal(err)
	}
	name := entraName("sas-readonly")
	if _, err := rawQueue(t, srv, name).Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	qp, err := sas.AccountSignatureValues{
		Protocol:      sas.ProtocolHTTPSandHTTP,
		ExpiryTime:    time.Now().Add(time.Hour).UTC(),
		Permissions:   (&sas.AccountPermissions{Read: true}).String(),
		ResourceTypes: (&sas.AccountResourceTypes{Service: true, Container: true, Object: true}).String(),
	}.SignWithSharedKey(cred)
	if err != nil {
		t.Fatal(err)
	}
	acct := newAccount(t, srv, azure.Config{SAS: qp.Encode(), NoCreate: true, NoClaimCheck: true})
	q := openQueue(t, acct, name)
	_, err = q.Put(ctx, []byte("x"), queue.PutOptions{})
	e := azureErr(t, err)
	if !errors.Is(err, azure.ErrAuth) || queue.IsTransient(err) || e.StatusCode != 403 || e.Code != "AuthorizationPermissionMismatch" {
		t.Fatalf("put with a read-only SAS: %v, want ErrAuth, 403 AuthorizationPermissionMismatch", err)
	}
	if !strings.Contains(e.Hint, "the SAS does not allow put on the queue service") {
		t.Fatalf("hint %q: want it to say the SAS lacks the permission", e.Hint)
	}
	if strings.Contains(err.Error(), qp.Signature()) {
		t.Fatalf("error %q carries the SAS signature", err)
	}
}
