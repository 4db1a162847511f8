package main

import (
	"strings"
	"testing"
)

// A password with a bare % (Xy7%of9Secret) makes url.Parse fail, and its
// error repeats the whole URL: no command may print it, whichever the
// scheme and however the URL reached it (--url, or a config's queues[].url).
func TestUnparsableURLNeverShowsThePassword(t *testing.T) {
	t.Parallel()
	const secret = "of9Secret"
	dir := t.TempDir()
	cfg := writeConfig(t, dir, `
log: {level: error}
admin: {address: ""}
queues:
  - name: orders
    url: "postgres://app:Xy7%of9Secret@127.0.0.1:5432/test?queue=orders"
`)
	for _, u := range []string{
		"postgres://app:Xy7%of9Secret@127.0.0.1:5432/test?queue=orders",
		"redis://app:Xy7%of9Secret@127.0.0.1:6379/0?queue=orders",
		"sqs://u:Xy7%of9Secret@us-east-1/000000000000/orders",
	} {
		for _, args := range [][]string{
			{"peek", "--url", u},
			{"stats", "--url", u},
			{"purge", "--url", u, "--yes"},
			{"poison", "list", "--url", u},
			{"enqueue", "--url", u, "x"},
			{"poison", "show", "--url", u, "some-id"},
		} {
			r := cli(t, "", args...)
			if r.code == 0 {
				t.Errorf("adaptq %s: exit 0", strings.Join(args, " "))
			}
			if strings.Contains(r.stdout+r.stderr, secret) || strings.Contains(r.stdout+r.stderr, "%of") {
				t.Errorf("adaptq %s prints the password:\n%s%s", strings.Join(args, " "), r.stdout, r.stderr)
			}
		}
	}
	for _, args := range [][]string{
		{"peek", "-c", cfg, "-q", "orders"},
		{"stats", "-c", cfg},
		{"purge", "-c", cfg, "-q", "orders", "--yes"},
		{"poison", "list", "-c", cfg, "-q", "orders"},
	} {
		r := cli(t, "", args...)
		if r.code == 0 {
			t.Errorf("adaptq %s: exit 0", strings.Join(args, " "))
		}
		if strings.Contains(r.stdout+r.stderr, secret) || strings.Contains(r.stdout+r.stderr, "%of") {
			t.Errorf("adaptq %s prints the password:\n%s%s", strings.Join(args, " "), r.stdout, r.stderr)
		}
	}
}
