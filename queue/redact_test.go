package queue_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/adaptq/adaptq/queue"
)

func TestRedactTextHidesSecretsInFreeText(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`GET "https://a.queue.core.windows.net/q?sig=S3CR3T&sv=1": 403`, `GET "https://a.queue.core.windows.net/q?sig=REDACTED&sv=1": 403`},
		{"dial redis://u:S3CR3T@h:6379/0 refused", "dial redis://u:xxxxx@h:6379/0 refused"},
		{"login failed: password=S3CR3T user=bob", "login failed: password=REDACTED user=bob"},
		{"AccountName=a;AccountKey=S3CR3T;EndpointSuffix=x", "AccountName=a;AccountKey=REDACTED;EndpointSuffix=x"},
		{"curl: https://x/y?token=S3CR3T\nexit 3", "curl: https://x/y?token=REDACTED\nexit 3"},
		{"Authorization: Bearer S3CR3T.abc", "Authorization: Bearer REDACTED"},
		{`stderr: "see https://x/y?X-Amz-Signature=S3CR3T\" for details"`, `stderr: "see https://x/y?X-Amz-Signature=REDACTED\" for details"`},
		{"exit status 3: no such order 42", "exit status 3: no such order 42"},
		{"postgres://app:Xy7%of9S3CR3T@h/db failed", "postgres://app:xxxxx@h/db failed"},
	} {
		got := queue.RedactText(tc.in)
		if strings.Contains(got, "S3CR3T") || got != tc.want {
			t.Errorf("RedactText(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if again := queue.RedactText(got); again != got {
			t.Errorf("RedactText twice: %q, then %q", got, again)
		}
	}
}

func TestRedactErrorKeepsTheChain(t *testing.T) {
	err := queue.RedactError(errors.Join(io.ErrUnexpectedEOF, errors.New("token=S3CR3T")))
	if strings.Contains(err.Error(), "S3CR3T") || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("RedactError = %q, Is(EOF) %v", err, errors.Is(err, io.ErrUnexpectedEOF))
	}
	if queue.RedactError(err) != err || queue.RedactError(nil) != nil {
		t.Fatal("RedactError is not idempotent, or not nil for nil")
	}
}
