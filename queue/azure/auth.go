package azure

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/adaptq/adaptq/queue"
)

// Values of the auth= URL parameter (ParamAuth): how requests are
// authorized.
const (
	// AuthKey: a shared key, a SAS or a connection string (key_env=,
	// sas_env=, connection_string_env=, $AZURE_STORAGE_CONNECTION_STRING).
	// The default.
	AuthKey = "key"
	// AuthEntra: Microsoft Entra ID tokens from azidentity's
	// DefaultAzureCredential, which tries in turn the environment
	// (AZURE_TENANT_ID, AZURE_CLIENT_ID and a secret or certificate),
	// workload identity (AKS), managed identity (AZURE_CLIENT_ID picks a
	// user-assigned one), then the Azure CLI's, the Azure Developer CLI's
	// and Azure PowerShell's logins; AZURE_TOKEN_CREDENTIALS=prod or =dev
	// narrows the chain. With client_id= it is that user-assigned
	// identity: workload identity if the pod is set up for it
	// ($AZURE_FEDERATED_TOKEN_FILE), else managed identity.
	AuthEntra = "entra"
	// AuthManagedIdentity: the managed identity of the Azure host (VM,
	// App Service, Functions, Container Apps, AKS node); the
	// system-assigned one, or with client_id= a user-assigned one.
	AuthManagedIdentity = "managed_identity"
	// AuthWorkloadIdentity: AKS workload identity (a federated service
	// account token in $AZURE_FEDERATED_TOKEN_FILE, for the application
	// client_id= or $AZURE_CLIENT_ID in tenant_id= or $AZURE_TENANT_ID).
	AuthWorkloadIdentity = "workload_identity"
	// AuthAzureCLI: the Azure CLI's login (az login), for development;
	// tenant_id= picks the tenant.
	AuthAzureCLI = "azure_cli"
)

var authValues = []string{AuthKey, AuthEntra, AuthManagedIdentity, AuthWorkloadIdentity, AuthAzureCLI}

// TokenScope is the scope tokens are asked for: Azure Storage's audience,
// https://storage.azure.com, for the queue and the blob service alike.
const TokenScope = "https://storage.azure.com/.default"

// ErrAuth: Azure Storage refused the request's credential (401, or 403
// with an authentication or authorization code), or a token credential
// could not give a token (then the error is also a *CredentialError).
// The error's text says what to fix: a missing role, a wrong audience,
// an expired SAS, shared key access disabled on the account.
var ErrAuth = errors.New("azure: not authorized")

// CredentialError is a token credential's failure to give a token. It
// names the credential and says why, never with a token or a secret.
//
// It is transient (queue.IsTransient) when the token service was
// unreachable, timed out or answered 408, 429 or 5xx: a retry may get a
// token (an instance metadata service that is not up yet, a passing
// outage). It is not when no token source is configured or the identity
// was refused: someone must fix the setup. The listener retries a failed
// get either way, after its error backoff; a non-transient error is
// logged at error level, so the operator sees it, and the worker goes on
// once the identity works (a managed identity assigned late, a role
// granted after the deployment).
type CredentialError struct {
	// Credential says which credential failed: "auth=managed_identity
	// (user-assigned, client id …)", "auth=entra (DefaultAzureCredential)"
	// or "Config.Credential (*pkg.Type)".
	Credential string
	// Reason is why, on one line: azidentity's explanation (each
	// credential of a chain and why it was unavailable), the token
	// service's status and error description.
	Reason string

	transient bool
	err       error
}

func (e *CredentialError) Error() string {
	return "credential " + e.Credential + " got no token for " + TokenScope + ": " + e.Reason
}

// Unwrap returns the credential's own error.
func (e *CredentialError) Unwrap() error { return e.err }

// Transient reports whether a retry may get a token (see CredentialError).
func (e *CredentialError) Transient() bool { return e.transient }

// Is matches ErrAuth.
func (e *CredentialError) Is(target error) bool { return target == ErrAuth }

// namedCredential wraps a token credential so its failures are
// *CredentialError values naming it.
type namedCredential struct {
	name string
	cred azcore.TokenCredential
}

func (c *namedCredential) GetToken(ctx context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	tok, err := c.cred.GetToken(ctx, opts)
	if err != nil {
		return azcore.AccessToken{}, &CredentialError{
			Credential: c.name,
			Reason:     credentialReason(err),
			transient:  ctx.Err() == nil && credentialTransient(err),
			err:        err,
		}
	}
	return tok, nil
}

// nameCredential returns cred wrapped to name itself in errors, unless it
// is already (a credential ConfigFromURL made).
func nameCredential(cred azcore.TokenCredential) *namedCredential {
	if n, ok := cred.(*namedCredential); ok {
		return n
	}
	return &namedCredential{name: fmt.Sprintf("Config.Credential (%T)", cred), cred: cred}
}

// credentialName is how errors name the account's credential.
func credentialName(cfg Config) string {
	if cfg.Credential != nil {
		return nameCredential(cfg.Credential).name
	}
	return ""
}

// jwtLike matches a JSON Web Token, and secretField a token or secret in
// a token service's JSON answer: no error text carries either.
var (
	jwtLike     = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*`)
	secretField = regexp.MustCompile(`("(?:access_token|refresh_token|id_token|client_secret|client_assertion)"\s*:\s*")[^"]*`)
)

// credentialReason describes a credential's error on one line:
// azidentity's text (each credential of a chain and why it was
// unavailable; a token service's status and answer) with its lines
// joined and its separator lines dropped, tokens cut out.
func credentialReason(err error) string {
	var b strings.Builder
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.Trim(line, "-") == "" {
			continue
		}
		if prev := b.String(); prev != "" {
			// Lines of a list (a chain's credentials) are split by "; ".
			if strings.HasSuffix(prev, ":") || strings.HasSuffix(prev, ".") {
				b.WriteString(" ")
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(line)
	}
	s := b.String()
	s = jwtLike.ReplaceAllString(s, "REDACTED")
	s = secretField.ReplaceAllString(s, "${1}REDACTED")
	const max = 2000
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

// credentialTransient reports whether a retry may get a token: the token
// service was unreachable, timed out or was busy.
func credentialTransient(err error) bool {
	var afe *azidentity.AuthenticationFailedError
	if errors.As(err, &afe) && afe.RawResponse != nil {
		switch c := afe.RawResponse.StatusCode; {
		case c == http.StatusRequestTimeout, c == http.StatusTooManyRequests, c >= 500:
			return true
		}
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) || queue.IsTransient(err)
}

// newURLCredential is the azidentity credential auth= names.
func newURLCredential(auth, clientID, tenantID string) (azcore.TokenCredential, error) {
	var (
		cred azcore.TokenCredential
		err  error
		name = ParamAuth + "=" + auth
	)
	switch auth {
	case AuthEntra:
		if clientID == "" {
			name += " (DefaultAzureCredential)"
			cred, err = azidentity.NewDefaultAzureCredential(&azidentity.DefaultAzureCredentialOptions{TenantID: tenantID})
			break
		}
		name += " (user-assigned identity, client id " + clientID + ")"
		var chain []azcore.TokenCredential
		if os.Getenv("AZURE_FEDERATED_TOKEN_FILE") != "" {
			wi, werr := azidentity.NewWorkloadIdentityCredential(&azidentity.WorkloadIdentityCredentialOptions{ClientID: clientID, TenantID: tenantID})
			if werr == nil {
				chain = append(chain, wi)
			}
		}
		mi, merr := azidentity.NewManagedIdentityCredential(&azidentity.ManagedIdentityCredentialOptions{ID: azidentity.ClientID(clientID)})
		if merr != nil {
			err = merr
			break
		}
		chain = append(chain, mi)
		cred, err = azidentity.NewChainedTokenCredential(chain, nil)
	case AuthManagedIdentity:
		o := &azidentity.ManagedIdentityCredentialOptions{}
		if clientID != "" {
			name += " (user-assigned, client id " + clientID + ")"
			o.ID = azidentity.ClientID(clientID)
		} else {
			name += " (system-assigned)"
		}
		cred, err = azidentity.NewManagedIdentityCredential(o)
	case AuthWorkloadIdentity:
		cred, err = azidentity.NewWorkloadIdentityCredential(&azidentity.WorkloadIdentityCredentialOptions{ClientID: clientID, TenantID: tenantID})
	case AuthAzureCLI:
		cred, err = azidentity.NewAzureCLICredential(&azidentity.AzureCLICredentialOptions{TenantID: tenantID})
	default:
		return nil, fmt.Errorf("%s=%q: want one of %s", ParamAuth, auth, strings.Join(authValues, ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %s", name, credentialReason(err))
	}
	return &namedCredential{name: name, cred: cred}, nil
}

// authInfo says how an account's requests to one service are authorized,
// for explaining a refusal. It travels on each request's context, so
// classify finds it on the response's request.
type authInfo struct {
	method     string // "entra", "sas" or "key"
	credential string // the token credential's name, for entra
	service    string // "queue" or "blob"
	account    string
	container  string // the claim-check container, for blob
}

type authInfoKey struct{}

// authInfoPolicy puts its authInfo on each request's context.
type authInfoPolicy struct{ info *authInfo }

func (p authInfoPolicy) Do(req *policy.Request) (*http.Response, error) {
	ctx := context.WithValue(req.Raw().Context(), authInfoKey{}, p.info)
	return req.WithContext(ctx).Next()
}

// withAuthInfo is core with a policy that tags requests with info.
func withAuthInfo(core azcore.ClientOptions, info *authInfo) azcore.ClientOptions {
	core.PerCallPolicies = append(slices.Clone(core.PerCallPolicies), authInfoPolicy{info})
	return core
}

// Azure Storage's authentication and authorization error codes.
const (
	codeAuthenticationFailed         = "AuthenticationFailed"
	codeInvalidAuthenticationInfo    = "InvalidAuthenticationInfo"
	codeNoAuthenticationInformation  = "NoAuthenticationInformation"
	codeAuthorizationFailure         = "AuthorizationFailure"
	codeAuthorizationPermission      = "AuthorizationPermissionMismatch"
	codeAuthorizationService         = "AuthorizationServiceMismatch"
	codeAuthorizationResourceType    = "AuthorizationResourceTypeMismatch"
	codeAuthorizationSourceIP        = "AuthorizationSourceIPMismatch"
	codeAuthorizationProtocol        = "AuthorizationProtocolMismatch"
	codeKeyBasedAuthNotPermitted     = "KeyBasedAuthenticationNotPermitted"
	codeInvalidAuthenticationInfoOld = "InvalidAuthenticationInformation"
)

// queueRoles are the least built-in roles for each queue operation
// (Azure's "Authorize with Microsoft Entra ID" permission table):
// Update Message needs messages/write, which only Contributor has among
// the built-in queue data roles; Get Queue Metadata (count) and Create
// Queue are queues/read and queues/write.
var queueRoles = map[string]string{
	"open":   "Storage Queue Data Contributor to create the queue (Create Queue); or create it beforehand, set create=false and grant Storage Queue Data Reader",
	"put":    "Storage Queue Data Message Sender or Storage Queue Data Contributor",
	"get":    "Storage Queue Data Message Processor or Storage Queue Data Contributor",
	"delete": "Storage Queue Data Message Processor or Storage Queue Data Contributor",
	"update": "Storage Queue Data Contributor (Update Message needs messages/write, which Message Processor lacks)",
	"peek":   "Storage Queue Data Reader, Storage Queue Data Message Processor or Storage Queue Data Contributor",
	"count":  "Storage Queue Data Reader or Storage Queue Data Contributor (Get Queue Metadata)",
	"clear":  "Storage Queue Data Contributor",
}

// explainAuth marks a refusal of the request's credential as ErrAuth and
// says in e.Hint what to fix. It reports whether err was one.
func explainAuth(e *Error, re *azcore.ResponseError) bool {
	switch e.Code {
	case codeAuthenticationFailed, codeInvalidAuthenticationInfo, codeInvalidAuthenticationInfoOld, codeNoAuthenticationInformation,
		codeAuthorizationFailure, codeAuthorizationPermission, codeAuthorizationService, codeAuthorizationResourceType,
		codeAuthorizationSourceIP, codeAuthorizationProtocol, codeKeyBasedAuthNotPermitted:
	default:
		if re.StatusCode != http.StatusUnauthorized {
			return false
		}
	}
	e.kind = ErrAuth
	info := &authInfo{}
	if re.RawResponse != nil && re.RawResponse.Request != nil {
		if i, ok := re.RawResponse.Request.Context().Value(authInfoKey{}).(*authInfo); ok {
			info = i
		}
	}
	detail := ""
	if re.RawResponse != nil {
		detail = firstLine(xmlElement(re.Error(), "AuthenticationErrorDetail"))
	}
	var hints []string
	if detail != "" {
		hints = append(hints, detail)
	}
	switch e.Code {
	case codeKeyBasedAuthNotPermitted:
		hints = append(hints, "shared key access is disabled on account "+info.account+
			": authorize with Microsoft Entra ID instead (auth=entra, auth=managed_identity … or Config.Credential)")
	case codeAuthorizationPermission, codeAuthorizationFailure:
		var h string
		switch info.method {
		case "entra":
			scope, role := "queue", queueRoles[e.Op]
			if info.service == "blob" {
				scope, role = "container", "Storage Blob Data Contributor on the container "+info.container+" (claim-check payloads)"
			} else if role == "" {
				role = "Storage Queue Data Contributor"
			}
			h = fmt.Sprintf("the identity of credential %s lacks a role for %s: assign %s on the %s or the storage account %s (an assignment takes a few minutes to apply)",
				info.credential, e.Op, role, scope, info.account)
		case "sas":
			h = "the SAS does not allow " + e.Op + " on the " + info.service + " service (see its sp= permissions, ss= services and srt= resource types)"
		}
		if e.Code == codeAuthorizationFailure {
			// Azure's answer to a request its firewall or network rules
			// refuse, as well as to a missing permission.
			n := "the account's network rules (firewall, virtual networks, private endpoints) may refuse this host"
			if h != "" {
				h = n + "; or " + h
			} else {
				h = n
			}
		}
		if h != "" {
			hints = append(hints, h)
		}
	case codeAuthorizationService, codeAuthorizationResourceType:
		if info.method == "sas" {
			hints = append(hints, "the SAS does not cover the "+info.service+" service or this resource type (an account SAS for claim-check needs ss=bq and srt=sco)")
		}
	case codeAuthenticationFailed, codeInvalidAuthenticationInfo, codeInvalidAuthenticationInfoOld:
		switch info.method {
		case "entra":
			h := "the token of credential " + info.credential + " was refused"
			l := strings.ToLower(detail)
			switch {
			case strings.Contains(l, "audience"):
				h += ": it is for another audience; Azure Storage takes tokens for " + strings.TrimSuffix(TokenScope, "/.default") + " (scope " + TokenScope + ")"
			case strings.Contains(l, "issuer"), strings.Contains(l, "tenant"):
				h += ": it is from another tenant than the storage account's (set tenant_id= or AZURE_TENANT_ID)"
			case strings.Contains(l, "expired"), strings.Contains(l, "lifetime"):
				h += ": it has expired or is not yet valid (is this host's clock right?)"
			}
			hints = append(hints, h)
		case "sas":
			hints = append(hints, "the SAS was refused: expired, not yet valid, or signed with a key since rotated?")
		case "key":
			hints = append(hints, "the shared key was refused: is it account "+info.account+"'s, and current (keys are rotated)?")
		}
	}
	e.Hint = strings.Join(hints, "; ")
	return true
}

// xmlElement is the text of the first <name>…</name> in s.
func xmlElement(s, name string) string {
	i := strings.Index(s, "<"+name+">")
	if i < 0 {
		return ""
	}
	s = s[i+len(name)+2:]
	if j := strings.Index(s, "</"+name+">"); j >= 0 {
		s = s[:j]
	}
	return strings.TrimSpace(s)
}

// credentialFailed is the driver's error for a token credential that
// gave no token: ErrAuth, transient as the CredentialError says.
func credentialFailed(e *Error, ce *CredentialError) error {
	e.kind = ErrAuth
	e.Message = ce.Error()
	e.err = ce
	if ce.transient {
		return queue.Transient(e, 0)
	}
	return e
}

// checkTokenEndpoints refuses a token credential with an http endpoint:
// bearer tokens go over TLS only (the SDK refuses them too, later and
// less clearly).
func checkTokenEndpoints(c Config) error {
	for _, e := range []string{c.QueueEndpoint, c.BlobEndpoint} {
		if strings.HasPrefix(strings.ToLower(e), "http://") {
			return fmt.Errorf("%w: endpoint %q is http: a token credential (Microsoft Entra ID) needs https "+
				"(for Azurite, start it with a certificate and --oauth basic)", queue.ErrInvalidArgument, queue.Redact(e))
		}
	}
	return nil
}
