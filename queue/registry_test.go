package queue_test

import (
	"context"
	"errors"
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
