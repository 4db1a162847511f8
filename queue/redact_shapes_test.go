package queue_test

import (
	"strings"
	"testing"

	"github.com/adaptq/adaptq/queue"
)

// RedactText finds a secret in the shapes programs and client libraries
// print it in, whatever its case, quoting or encoding, and leaves ordinary
// text alone.
func TestRedactTextSecretShapes(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"URL userinfo, no user", "dial redis://:S3CR3T@h:6379: refused", "dial redis://:xxxxx@h:6379: refused"},
		{"URL userinfo", "connect postgres://app:S3CR3T@db:5432/x?sslmode=disable: timeout", "connect postgres://app:xxxxx@db:5432/x?sslmode=disable: timeout"},
		{"password=", "login failed: password=S3CR3T user=bob", "login failed: password=REDACTED user=bob"},
		{"sig= in a path without a scheme", "GET /q/messages?sv=1&sig=S3CR3T&se=2 403", "GET /q/messages?sv=1&sig=REDACTED&se=2 403"},
		{"token=", "refresh failed (token=S3CR3T)", "refresh failed (token=REDACTED"},
		{"Azure AccountKey", "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=S3CR3T+/ab==;EndpointSuffix=core.windows.net",
			"DefaultEndpointsProtocol=https;AccountName=a;AccountKey=REDACTED;EndpointSuffix=core.windows.net"},
		{"Azure SharedAccessSignature", "QueueEndpoint=https://a.queue.core.windows.net/;SharedAccessSignature=sv=2020-08-04&ss=q&sp=r&sig=S3CR3T%3D;x=1",
			"QueueEndpoint=https://a.queue.core.windows.net/;SharedAccessSignature=REDACTED;x=1"},
		{"Authorization: Bearer", "Authorization: Bearer S3CR3T.abc", "Authorization: Bearer REDACTED"},
		{"Authorization: Basic", "proxy said 407 to Proxy-Authorization: Basic dXNlcjpTM0NSM1Q=\nretrying", "proxy said 407 to Proxy-Authorization: Basic REDACTED\nretrying"},
		{"Authorization: AWS4", "Authorization: AWS4-HMAC-SHA256 Credential=AKIAS3CR3T/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=S3CR3T",
			"Authorization: AWS4-HMAC-SHA256 Credential=REDACTED, SignedHeaders=host, Signature=REDACTED"},
		{"Authorization in a wrapped error", "call: Authorization: Bearer S3CR3T: downstream refused", "call: Authorization: Bearer REDACTED: downstream refused"},
		{"Authorization: SharedKey", "Authorization: SharedKey acct:S3CR3T+/x= rejected", "Authorization: SharedKey REDACTED rejected"},
		{"a value that ends like a name", "sig=S3CR3TSECRET%3D: 403; Authorization: Bearer S3CR3Ttoken: refused", "sig=REDACTED 403; Authorization: Bearer REDACTED: refused"},
		{"an empty value before the next name", "password: token: S3CR3T\nkey= sig=S3CR3T", "password: token: REDACTED\nkey= sig=REDACTED"},
		{"header in JSON", `{"headers":{"authorization":"Bearer S3CR3T"}}`, `{"headers":{"authorization":"Bearer REDACTED"}}`},
		{"bearer, lower case", "sent bearer S3CR3T to h", "sent bearer REDACTED to h"},
		{"X-Amz-Signature outside a URL", "canonical: X-Amz-Signature=S3CR3T&X-Amz-Date=1", "canonical: X-Amz-Signature=REDACTED&X-Amz-Date=1"},
		{"AWS_SECRET_ACCESS_KEY", "env: AWS_SECRET_ACCESS_KEY=S3CR3T AWS_REGION=eu-west-1", "env: AWS_SECRET_ACCESS_KEY=REDACTED AWS_REGION=eu-west-1"},
		{"single-quoted with spaces", "export ADAPTQ_ADMIN_TOKEN='S3CR3T value'", "export ADAPTQ_ADMIN_TOKEN='REDACTED'"},
		{"JSON password", `{"user":"bob","password":"S3CR3T"}`, `{"user":"bob","password":"REDACTED"}`},
		{"JSON, spaced, escaped quote", `{"client_secret": "S3 CR3T\"x", "n": 1}`, `{"client_secret": "REDACTED", "n": 1}`},
		{"JSON escaped in a quoted string", `body: "{\"apikey\":\"S3CR3T\"}"`, `body: "{\"apikey\":\"REDACTED\"}"`},
		{"api_key=", "GET /v1?api_key=S3CR3T&q=x", "GET /v1?api_key=REDACTED&q=x"},
		{"x-api-key header", "x-api-key: S3CR3T", "x-api-key: REDACTED"},
		{"double-quoted with spaces", `password="hunter 2 S3CR3T" rejected`, `password="REDACTED" rejected`},
		{"percent-encoded in a parameter", "redirect https://app/cb?next=https%3A%2F%2Fa%2Fq%3Fsig%3DS3CR3T%26sv%3D1 failed",
			"redirect https://app/cb?next=https%3A%2F%2Fa%2Fq%3Fsig%3DREDACTED%26sv%3D1 failed"},
		{"percent-encoded value", "password=S3%21CR3T&x=1", "password=REDACTED&x=1"},
		{"upper case", "PASSWORD=S3CR3T", "PASSWORD=REDACTED"},
		{"mixed case", "Token=S3CR3T; Sig=S3CR3T", "Token=REDACTED; Sig=REDACTED"},
		{"BEARER", "BEARER S3CR3T", "BEARER REDACTED"},
		{"Python dict", "{'password': 'S3CR3T'}", "{'password': 'REDACTED'}"},
		{"YAML", "db:\n  password: S3CR3T\n  host: h", "db:\n  password: REDACTED\n  host: h"},
		{"PostgreSQL keyword DSN", "host=db user=app password='S3 CR3T' dbname=x", "host=db user=app password='REDACTED' dbname=x"},
		{"Cookie", "Cookie: adaptq_admin_8080=S3CR3T; theme=dark", "Cookie: REDACTED"},
		{"client_secret=", "client_id=abc&client_secret=S3CR3T", "client_id=abc&client_secret=REDACTED"},
		{"private key", "key.pem: -----BEGIN RSA PRIVATE KEY-----\nMIIS3CR3T\n-----END RSA PRIVATE KEY----- bad", "key.pem: -----BEGIN RSA PRIVATE KEY-----REDACTED-----END RSA PRIVATE KEY----- bad"},
		{"private key alone", "-----BEGIN PRIVATE KEY-----\nMIIS3CR3T", "-----BEGIN PRIVATE KEY-----REDACTED"},
		{"private key, cut short", "tail: -----BEGIN PRIVATE KEY-----\nMIIS3CR3T", "tail: -----BEGIN PRIVATE KEY-----REDACTED"},
	} {
		got := queue.RedactText(tc.in)
		if strings.Contains(got, "S3CR3T") || strings.Contains(got, "S3 CR3T") || got != tc.want {
			t.Errorf("%s: RedactText(%q)\n = %q\nwant %q", tc.name, tc.in, got, tc.want)
		}
		if again := queue.RedactText(got); again != got {
			t.Errorf("%s: RedactText twice: %q, then %q", tc.name, got, again)
		}
	}
}

// Ordinary text, an error's or a program's, passes unchanged.
func TestRedactTextLeavesOrdinaryTextAlone(t *testing.T) {
	for _, s := range []string{
		"exit status 3: no such order 42",
		`ERROR: duplicate key value violates unique constraint "orders_pkey"`,
		"GET https://a.queue.core.windows.net/orders?timeout=30: 503 Server Busy",
		"401 Unauthorized: token expired",
		"tokenizer=bpe monkey=banana keyboard=us",
		"host=db port=5432 user=app dbname=orders sslmode=disable",
		"AccountName=devstoreaccount1;EndpointSuffix=core.windows.net",
		"passwords must be at least 12 characters",
		"signature verification failed: bad digest",
		"the auth scheme must be Bearer",
		"sort_key=created_at partition_key=7",
		`invalid value for key "timeout": 3x`,
		"line one\nline two: ok\n",
		"authorization failed for user bob",
		`{"id":"42","status":"shipped","tokens":3}`,
		"C:\\Users\\bob\\AppData\\Local\\Temp\\x.txt: access denied",
	} {
		if got := queue.RedactText(s); got != s {
			t.Errorf("RedactText(%q) = %q, want it unchanged", s, got)
		}
	}
}

// Long inputs full of near misses and of secrets are redacted in one
// linear pass (Go's regexp never backtracks): the outcome is checked, on
// inputs a quadratic scan would not finish within the test's time.
func TestRedactTextLongInputs(t *testing.T) {
	for _, unit := range []string{"password=", "a_token", "Authorization:", "\"password\":\"", "%3Fsig%3D", "x://", "bearer "} {
		s := strings.Repeat(unit, 200_000/len(unit))
		_ = queue.RedactText(s)
	}
	s := strings.Repeat("password=S3CR3T ", 20_000)
	if got := queue.RedactText(s); strings.Contains(got, "S3CR3T") || strings.Count(got, "REDACTED") != 20_000 {
		t.Fatalf("%d of 20000 redacted", strings.Count(got, "REDACTED"))
	}
}
