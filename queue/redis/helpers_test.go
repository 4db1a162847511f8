package redis_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/adaptq/adaptq/queue/redis"
)

// The tests run against a real Redis: 127.0.0.1:6379, database 0, unless
// ADAPTQ_TEST_REDIS_URL names another (its password, if any, in
// ADAPTQ_REDIS_PASSWORD, as for the driver). Under CI=true a server that
// does not answer fails the run; elsewhere the tests skip, saying why.
const (
	urlEnv     = "ADAPTQ_TEST_REDIS_URL"
	defaultURL = "redis://127.0.0.1:6379/0"
)

func serverURL() string {
	if u := os.Getenv(urlEnv); u != "" {
		return u
	}
	return defaultURL
}

var prefixes atomic.Int64

// testPrefix is a key prefix no other test or run uses: the process id, the
// start time and a counter.
func testPrefix() string {
	return fmt.Sprintf("adaptqtest:%d-%d-%d:", os.Getpid(), time.Now().UnixNano(), prefixes.Add(1))
}

// server connects to the test server or skips (fails under CI) and
// deletes every key under prefix when the test ends.
func server(t testing.TB, prefix string) *goredis.Client {
	t.Helper()
	opt, err := goredis.ParseURL(serverURL())
	if err != nil {
		t.Fatalf("%s: %v", urlEnv, err)
	}
	if pw := os.Getenv(redis.PasswordEnv); pw != "" {
		opt.Password = pw
	}
	rdb := goredis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		msg := fmt.Sprintf("no Redis at %s (%v): start redis-server on 127.0.0.1:6379 or set %s", opt.Addr, err, urlEnv)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() {
		deletePrefix(t, rdb, prefix)
		_ = rdb.Close()
	})
	return rdb
}

// deletePrefix removes every key under prefix.
func deletePrefix(t testing.TB, rdb *goredis.Client, prefix string) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 500 {
			rdb.Unlink(ctx, keys...)
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		rdb.Unlink(ctx, keys...)
	}
	if err := iter.Err(); err != nil {
		t.Errorf("deleting the test keys under %q: %v", prefix, err)
	}
}

// newClient is a driver Client with its own prefix over the test server.
func newClient(t testing.TB, opts ...redis.Option) (*redis.Client, string) {
	t.Helper()
	prefix := testPrefix()
	rdb := server(t, prefix)
	c := redis.New(rdb, append([]redis.Option{redis.WithKeyPrefix(prefix)}, opts...)...)
	t.Cleanup(func() { _ = c.Close() })
	return c, prefix
}

// queueURL is the URL of queue name under prefix on the test server.
func queueURL(name, prefix string, extra string) string {
	return fmt.Sprintf("%s?queue=%s&prefix=%s%s", serverURL(), name, prefix, extra)
}
