package azure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/adaptq/adaptq/queue"
)

// refusal is Azure Storage's answer code to a request tagged with info,
// as the SDK returns it.
func refusal(status int, code, detail string, info *authInfo) error {
	body := `<?xml version="1.0" encoding="utf-8"?><Error><Code>` + code + `</Code><Message>Refused.` + "\n" +
		`RequestId:1</Message>`
	if detail != "" {
		body += `<AuthenticationErrorDetail>` + detail + `</AuthenticationErrorDetail>`
	}
	body += `</Error>`
	req, _ := http.NewRequestWithContext(context.WithValue(context.Background(), authInfoKey{}, info), http.MethodGet,
		"https://myaccount.queue.core.windows.net/orders/messages", nil)
	resp := &http.Response{
		StatusCode: status,
		Status:     http.StatusText(status),
		Header:     http.Header{"X-Ms-Error-Code": {code}, "Content-Type": {"application/xml"}},
		Body:       io.NopCloser(strings.NewReader(body)),
		Request:    req,
	}
	return runtime.NewResponseError(resp)
}

// Azure's refusals that Azurite cannot make (it has no RBAC, and shared
// key access cannot be turned off on it) say what to fix: the role each
// operation needs, the audience tokens need, shared key access disabled.
// Azurite's own refusals are tested end to end in entra_test.go.
func TestExplainAuth(t *testing.T) {
	entraQ := &authInfo{method: "entra", credential: "auth=managed_identity (system-assigned)", service: "queue", account: "myaccount"}
	entraB := &authInfo{method: "entra", credential: "auth=entra (DefaultAzureCredential)", service: "blob", account: "myaccount", container: "adaptq-payloads"}
	keyQ := &authInfo{method: "key", service: "queue", account: "myaccount"}
	cases := []struct {
		op     string
		status int
		code   string
		detail string
		info   *authInfo
		says   []string
	}{
		{"get", 403, "AuthorizationPermissionMismatch", "", entraQ,
			[]string{"auth=managed_identity (system-assigned)", "lacks a role for get", "Storage Queue Data Message Processor or Storage Queue Data Contributor", "myaccount"}},
		{"delete", 403, "AuthorizationPermissionMismatch", "", entraQ, []string{"Storage Queue Data Message Processor"}},
		{"put", 403, "AuthorizationPermissionMismatch", "", entraQ, []string{"Storage Queue Data Message Sender"}},
		{"update", 403, "AuthorizationPermissionMismatch", "", entraQ, []string{"Storage Queue Data Contributor", "Message Processor lacks"}},
		{"count", 403, "AuthorizationPermissionMismatch", "", entraQ, []string{"Storage Queue Data Reader"}},
		{"open", 403, "AuthorizationPermissionMismatch", "", entraQ, []string{"Storage Queue Data Contributor to create the queue", "create=false"}},
		{"get", 403, "AuthorizationFailure", "", entraQ, []string{"network rules", "Storage Queue Data Message Processor"}},
		{"put", 403, "AuthorizationPermissionMismatch", "", entraB, []string{"Storage Blob Data Contributor on the container adaptq-payloads"}},
		{"get", 401, "InvalidAuthenticationInfo", "Audience validation failed. Audience did not match.", entraQ,
			[]string{"Audience validation failed", "another audience", "https://storage.azure.com"}},
		{"get", 401, "InvalidAuthenticationInfo", "Issuer validation failed. Issuer did not match.", entraQ, []string{"another tenant", "tenant_id="}},
		{"get", 403, "KeyBasedAuthenticationNotPermitted", "", keyQ, []string{"shared key access is disabled on account myaccount", "auth=entra"}},
		{"get", 403, "AuthenticationFailed", "The MAC signature found in the HTTP request is not the same as any computed signature.", keyQ,
			[]string{"MAC signature", "the shared key was refused"}},
	}
	for _, c := range cases {
		err := classify(context.Background(), c.op, "orders", refusal(c.status, c.code, c.detail, c.info))
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrAuth) || queue.IsTransient(err) || e.Code != c.code {
			t.Errorf("%s %d %s: %v, want a permanent ErrAuth", c.op, c.status, c.code, err)
			continue
		}
		for _, s := range c.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s %d %s: %q does not say %q", c.op, c.status, c.code, err, s)
			}
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%q spans lines", err)
		}
	}
}

// A credential's error becomes one line without a token or a secret, and
// is transient only when the token service was unreachable or busy.
func TestCredentialError(t *testing.T) {
	jwt := "eyJhbGciOiJIUzI1NiJ9.eyJhdWQiOiJodHRwczovL3N0b3JhZ2UuYXp1cmUuY29tIn0.c2lnbmF0dXJl"
	raw := errors.New("ManagedIdentityCredential authentication failed. Unexpected response content\n" +
		"GET http://169.254.169.254/metadata/identity/oauth2/token\n" +
		"--------------------------------------------------------------------------------\n" +
		"RESPONSE 200: 200 OK\n" +
		"{\n  \"access_token\": \"" + jwt + "\",\n  \"refresh_token\": \"opaque-refresh\",\n  \"expires_on\": \"soon\"\n}\n" +
		"Authorization: Bearer " + jwt)
	r := credentialReason(raw)
	for _, secret := range []string{jwt, "opaque-refresh", "\n"} {
		if strings.Contains(r, secret) {
			t.Errorf("reason %q holds %q", r, secret)
		}
	}
	if !strings.Contains(r, "ManagedIdentityCredential authentication failed") || !strings.Contains(r, "RESPONSE 200") {
		t.Errorf("reason %q lost the explanation", r)
	}

	cred := &namedCredential{name: "test", cred: nil}
	for _, c := range []struct {
		err       error
		transient bool
	}{
		{&azidentity.AuthenticationFailedError{RawResponse: &http.Response{StatusCode: 503}}, true},
		{&azidentity.AuthenticationFailedError{RawResponse: &http.Response{StatusCode: 429}}, true},
		{&azidentity.AuthenticationFailedError{RawResponse: &http.Response{StatusCode: 400}}, false},
		{fmt.Errorf("token request: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{azidentity.NewCredentialUnavailableError("no managed identity endpoint"), false},
	} {
		cred.cred = failingCred{c.err}
		_, err := cred.GetToken(context.Background(), policy.TokenRequestOptions{Scopes: []string{TokenScope}})
		var ce *CredentialError
		if !errors.As(err, &ce) || queue.IsTransient(err) != c.transient || !errors.Is(err, ErrAuth) {
			t.Errorf("%v: %v (transient %v), want a CredentialError, transient %v", c.err, err, queue.IsTransient(err), c.transient)
		}
	}
}

type failingCred struct{ err error }

func (f failingCred) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{}, f.err
}
