package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
)

func TestParseURL(t *testing.T) {
	cases := []struct {
		url  string
		want config
	}{
		{"redis://127.0.0.1:6379/0?queue=orders", config{addr: "127.0.0.1:6379", queue: "orders", prefix: DefaultKeyPrefix, blockTimeout: DefaultBlockTimeout}},
		{"redis://cache?queue=orders", config{addr: "cache:6379", queue: "orders", prefix: DefaultKeyPrefix, blockTimeout: DefaultBlockTimeout}},
		{"rediss://worker@cache.example.com:6380/2?queue=a-b&prefix=app1:&block_timeout=1m",
			config{tls: true, addr: "cache.example.com:6380", user: "worker", db: 2, queue: "a-b", prefix: "app1:", blockTimeout: time.Minute}},
		{"redis://[::1]:7000/3?queue=abc", config{addr: "[::1]:7000", db: 3, queue: "abc", prefix: DefaultKeyPrefix, blockTimeout: DefaultBlockTimeout}},
		{"redis://h?queue=abc&pool_size=32", config{addr: "h:6379", queue: "abc", prefix: DefaultKeyPrefix, blockTimeout: DefaultBlockTimeout, poolSize: 32}},
	}
	for _, c := range cases {
		got, err := parseURL(c.url)
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		got.redacted = ""
		if *got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.url, *got, c.want)
		}
	}
}

func TestParseURLErrors(t *testing.T) {
	cases := map[string]string{
		"redis://u:hunter2@h:6379/0?queue=abc":         PasswordEnv,
		"redis://h:6379/x?queue=abc":                   "not a number",
		"redis://h:6379/0?queue=abc&block_timeout=5":   "block_timeout",
		"redis://h:6379/0?queue=abc&block_timeout=1ms": "block_timeout",
		"redis://h:6379/0?queue=abc&db=1":              `unknown parameter "db"`,
		"redis://h:6379/0?queue=abc&pool_size=1":       `pool_size "1"`,
		"redis://h:6379/0?queue=abc&pool_size=ten":     `pool_size "ten"`,
		"redis://h:6379/0?queue=a&queue=b":             "given 2 times",
		"redis:h":                                      "HOST:PORT",
		"http://h:6379/0?queue=abc":                    "scheme",
	}
	for u, want := range cases {
		_, err := parseURL(u)
		if !errors.Is(err, queue.ErrInvalidURL) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want ErrInvalidURL naming %q", u, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error shows the password: %v", u, err)
		}
	}
}

func TestOpenURLNeedsAValidQueue(t *testing.T) {
	ctx := context.Background()
	for u, want := range map[string]error{
		"redis://127.0.0.1:1/0":                queue.ErrInvalidURL,
		"redis://127.0.0.1:1/0?queue=Bad_Name": queue.ErrInvalidName,
	} {
		if _, err := queue.Open(ctx, u); !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", u, err, want)
		}
	}
}

func TestPasswordFromTheEnvironment(t *testing.T) {
	t.Setenv(PasswordEnv, "s3cret")
	cfg, err := parseURL("rediss://app@h:6380/1?queue=abc")
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.redisOptions()
	if o.Password != "s3cret" || o.Username != "app" || o.DB != 1 || o.TLSConfig == nil || o.TLSConfig.ServerName != "h" || o.MaxRetries != -1 {
		t.Fatalf("options %+v", o)
	}
	if strings.Contains(cfg.redacted, "s3cret") {
		t.Fatal("the password is in the redacted URL")
	}
}
