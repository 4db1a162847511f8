package queue_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/adaptq/adaptq/queue"
)

func TestRedactHidesSecrets(t *testing.T) {
	for _, raw := range []string{
		"azure://acct/q?sig=TOPSECRET&endpoint=http://x",
		"azure://acct/q?SIG=TOPSECRET",
		"https://user:TOPSECRET@host/path",
		"sqlite://./x.db?queue=a&password=TOPSECRET",
		"ftp://user:TOPSECRET@ex .com/x", // unparseable
		"user:TOPSECRET@host",            // no scheme
		"::weird?key=TOPSECRET",
	} {
		got := queue.Redact(raw)
		if strings.Contains(got, "TOPSECRET") {
			t.Errorf("Redact(%q) = %q shows the secret", raw, got)
		}
	}
	if got := queue.Redact("sqlite://./data/a.db?queue=orders"); got != "sqlite://./data/a.db?queue=orders" {
		t.Errorf("Redact changed a URL without secrets: %q", got)
	}
}

func TestValidateName(t *testing.T) {
	for name, ok := range map[string]bool{
		"abc": true, "a-b-c": true, "a1": false, "-ab": false, "ab-": false, "a--b": false, "aBc": false,
		strings.Repeat("x", 63): true, strings.Repeat("x", 64): false, "ab_c": false,
	} {
		if err := queue.ValidateName(name); (err == nil) != ok {
			t.Errorf("ValidateName(%q) = %v", name, err)
		}
	}
}

// A URL whose driver the program did not import names the scheme and, for
// a driver of this module, the import line to add; this test binary
// imports the memory driver only.
func TestOpenNamesTheMissingDriverImport(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url, want string
		builtin   bool
	}{
		{"redis://127.0.0.1:6379/0?queue=orders", `queue: no driver for scheme "redis": import _ "github.com/adaptq/adaptq/queue/redis"`, true},
		{"rediss://127.0.0.1:6379/0?queue=orders", `queue: no driver for scheme "rediss": import _ "github.com/adaptq/adaptq/queue/redis"`, true},
		{"postgresql://127.0.0.1/test?queue=orders", `import _ "github.com/adaptq/adaptq/queue/postgres"`, true},
		{"sqlite://./x.db?queue=orders", `import _ "github.com/adaptq/adaptq/queue/sqlite"`, true},
		{"azure://acct/orders", `import _ "github.com/adaptq/adaptq/queue/azure"`, true},
		{"sqs://orders", `import _ "github.com/adaptq/adaptq/queue/sqs"`, true},
		{"nosuch://x", `queue: no driver for scheme "nosuch": its driver's package is not imported (registered: memory`, false},
	} {
		_, err := queue.Open(context.Background(), tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v, want %q", tc.url, err, tc.want)
			continue
		}
		var nd *queue.NoDriverError
		if !errors.As(err, &nd) || !errors.Is(err, queue.ErrNoDriver) || !errors.Is(err, queue.ErrInvalidURL) {
			t.Errorf("Open(%q) = %#v: want a *NoDriverError matching ErrNoDriver and ErrInvalidURL", tc.url, err)
			continue
		}
		if (nd.Import != "") != tc.builtin {
			t.Errorf("Open(%q): Import %q", tc.url, nd.Import)
		}
	}
	if err := queue.CheckScheme("memory"); err != nil {
		t.Errorf("CheckScheme(memory) = %v, want nil: the test imports the driver", err)
	}
	if got := queue.KnownSchemes(); !slices.Contains(got, "redis") || !slices.Contains(got, "memory") {
		t.Errorf("KnownSchemes() = %v, want the built-in schemes, imported or not", got)
	}
}

// url.Parse repeats the raw URL in its error: Open must not, and the
// reason it gives must not quote the password's characters either.
func TestOpenOfAnUnparsableURLNeverShowsThePassword(t *testing.T) {
	for _, raw := range []string{
		"postgres://app:Xy7%of9Secret@127.0.0.1/test?queue=orders",
		"memory://user:Xy7%of9Secret@orders",
		"azure://acct:Xy7%of9Secret@acct/q",
	} {
		_, err := queue.Open(context.Background(), raw)
		if err == nil {
			t.Fatalf("Open(%q) succeeded", raw)
		}
		if !errors.Is(err, queue.ErrInvalidURL) {
			t.Errorf("Open(%q) = %v, want ErrInvalidURL", raw, err)
		}
		if s := err.Error(); strings.Contains(s, "of9Secret") || strings.Contains(s, "%of") {
			t.Errorf("Open(%q) = %q shows the password", raw, s)
		}
		if !strings.Contains(err.Error(), "%25") {
			t.Errorf("Open(%q) = %q does not say how to write a %%", raw, err)
		}
	}
}
