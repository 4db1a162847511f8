package azuritetest

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// Claims Azurite's basic OAuth accepts (it checks the token's shape,
// lifetime, issuer prefix and audience, not its signature).
const (
	// Audience is Azure Storage's audience, the one tokens for the scope
	// https://storage.azure.com/.default carry.
	Audience = "https://storage.azure.com"
	// Issuer is an Entra ID issuer (a made-up tenant under
	// https://sts.windows.net/, the prefix Azurite accepts).
	Issuer = "https://sts.windows.net/00000000-0000-0000-0000-0000000a2a1e/"
	// TokenLifetime is how long a minted token is valid.
	TokenLifetime = time.Hour
)

// TokenCredential is an azcore.TokenCredential that mints JWTs Azurite
// (started with Options{OAuth: true}) accepts, as a managed identity's
// token would be: audience Audience, issuer Issuer, valid for
// TokenLifetime. Its fields change what it mints, to test the failures;
// set them before use. The zero value is ready to use and safe for
// concurrent use.
type TokenCredential struct {
	// Audience, if set, replaces the aud claim (to test a wrong audience).
	Audience string
	// Issuer, if set, replaces the iss claim.
	Issuer string
	// Lifetime, if set, replaces TokenLifetime (a short one makes the
	// SDK ask for a new token on each request once the last expired).
	Lifetime time.Duration
	// Fail, if set, is called before each token is minted; an error it
	// returns is GetToken's (to test a credential that cannot get a
	// token).
	Fail func(calls int64) error

	calls atomic.Int64
	mu    sync.Mutex
	last  string
}

// GetToken mints a token for opts' scopes.
func (c *TokenCredential) GetToken(_ context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	n := c.calls.Add(1)
	if c.Fail != nil {
		if err := c.Fail(n); err != nil {
			return azcore.AccessToken{}, err
		}
	}
	if len(opts.Scopes) == 0 {
		return azcore.AccessToken{}, errors.New("azuritetest: GetToken without a scope")
	}
	aud := c.Audience
	if aud == "" {
		// The scope is the audience plus "/.default".
		aud = strings.TrimSuffix(strings.TrimSuffix(opts.Scopes[0], "/.default"), "/")
	}
	iss := c.Issuer
	if iss == "" {
		iss = Issuer
	}
	life := c.Lifetime
	if life <= 0 {
		life = TokenLifetime
	}
	now := time.Now()
	exp := now.Add(life)
	tok, err := mintJWT(map[string]any{
		"aud": aud,
		"iss": iss,
		"iat": now.Unix(),
		"nbf": now.Add(-time.Minute).Unix(),
		"exp": exp.Unix(),
		"oid": "00000000-0000-0000-0000-00000000a11d",
		"tid": "00000000-0000-0000-0000-0000000a2a1e",
		"sub": "adaptq-azuritetest",
		"ver": "1.0",
	})
	if err != nil {
		return azcore.AccessToken{}, err
	}
	c.mu.Lock()
	c.last = tok
	c.mu.Unlock()
	return azcore.AccessToken{Token: tok, ExpiresOn: exp}, nil
}

// Calls is how many tokens were asked for.
func (c *TokenCredential) Calls() int64 { return c.calls.Load() }

// LastToken is the last token minted (for tests that check it never
// reaches an error or a log).
func (c *TokenCredential) LastToken() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// mintJWT encodes claims as an HS256 JWT signed with a fixed test key
// (Azurite does not check signatures; the token just has a real shape).
func mintJWT(claims map[string]any) (string, error) {
	enc := base64.RawURLEncoding
	header, err := json.Marshal(map[string]string{"alg": "HS256", "typ": "JWT"})
	if err != nil {
		return "", err
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	signing := enc.EncodeToString(header) + "." + enc.EncodeToString(payload)
	mac := hmac.New(sha256.New, []byte("adaptq azuritetest, not a secret"))
	mac.Write([]byte(signing))
	return signing + "." + enc.EncodeToString(mac.Sum(nil)), nil
}
