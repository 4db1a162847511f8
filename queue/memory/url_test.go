package memory_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/adaptq/adaptq/queue"
	_ "github.com/adaptq/adaptq/queue/memory"
)

func TestOpenURL(t *testing.T) {
	ctx := context.Background()
	a, err := queue.Open(ctx, "memory://url-shared")
	if err != nil {
		t.Fatal(err)
	}
	b, err := queue.Open(ctx, "memory:///url-shared")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Count(ctx); err != nil || n != 1 {
		t.Fatalf("second URL on the same name counts %d, %v; want 1", n, err)
	}
	if err := a.Clear(ctx); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		url    string
		target error
		names  string
	}{
		{"memory://", queue.ErrInvalidURL, "no queue name"},
		{"memory://ab", queue.ErrInvalidName, `"ab"`},
		{"memory://Orders", queue.ErrInvalidName, `"Orders"`},
		{"memory://orders?ttl=1h", queue.ErrInvalidURL, `"ttl"`},
		{"memory://orders/extra", queue.ErrInvalidURL, "memory://NAME"},
		{"nosuch://orders", queue.ErrInvalidURL, `"nosuch"`},
		{"orders", queue.ErrInvalidURL, "no scheme"},
		// url.Parse's reason, without the URL, which may hold a password.
		{"::bad", queue.ErrInvalidURL, "missing protocol scheme"},
	} {
		_, err := queue.Open(ctx, tc.url)
		if !errors.Is(err, tc.target) {
			t.Errorf("Open(%q) = %v, want %v", tc.url, err, tc.target)
			continue
		}
		if !strings.Contains(err.Error(), tc.names) {
			t.Errorf("Open(%q) error %q does not say %s", tc.url, err, tc.names)
		}
	}
}
