package queue_test

import (
	"strings"
	"testing"

	"github.com/adaptq/adaptq/queue"
)

// RedactText never panics, redacts idempotently, and hides a secret
// planted after any name it knows, on a line of its own after any text.
func FuzzRedactText(f *testing.F) {
	for _, s := range []string{"password=x", `{"token": "a b"}`, "Authorization: Bearer x: y", "%3Fsig%3Dx%26", "redis://:p@h",
		"-----BEGIN PRIVATE KEY-----\nx", "a\\\"apikey\\\":\\\"x", "Cookie: a=b", "key=", "bearer  ", "x://a:b@c?d#e@f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		once := queue.RedactText(s)
		if twice := queue.RedactText(once); twice != once {
			t.Fatalf("RedactText(%q) = %q, then %q", s, once, twice)
		}
		for _, name := range []string{"password=", "token: ", `"secret":"`, "sig=", "Authorization: Bearer "} {
			in := s + "\n" + name + "PLANTEDSECRET"
			if got := queue.RedactText(in); strings.Contains(got, "PLANTEDSECRET") {
				t.Fatalf("RedactText(%q) = %q", in, got)
			}
		}
	})
}
