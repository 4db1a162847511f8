package redis_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/adaptq/adaptq/internal/testutil"
)

// ownServer is a redis-server of the test's own on a free loopback port,
// its data in a temporary directory, for the cases that restart the
// server, read its server-wide statistics or count every key it holds.
// Without the binary the test skips (and fails under CI=true).
type ownServer struct {
	t      testing.TB
	bin    string
	dir    string
	port   int
	args   []string
	cmd    *exec.Cmd
	exited chan error      // cmd's Wait
	rdb    *goredis.Client // the test's own connection, for what it checks
}

// startServer starts redis-server with RDB snapshots only by SAVE (no
// automatic saves, no AOF) and extra arguments, and stops it when the test
// ends.
func startServer(t testing.TB, extra ...string) *ownServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "no redis-server binary on PATH: " + err.Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	s := &ownServer{t: t, bin: bin, dir: t.TempDir()}
	s.port = freePort(t)
	s.args = append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}, extra...)
	s.start()
	s.rdb = goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
	t.Cleanup(func() {
		_ = s.rdb.Close()
		s.kill()
	})
	return s
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Addr is the server's host:port.
func (s *ownServer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is the redis:// URL of queue name under prefix on the server.
func (s *ownServer) URL(name, prefix, extra string) string {
	return fmt.Sprintf("redis://%s/0?queue=%s&prefix=%s%s", s.Addr(), name, prefix, extra)
}

// start runs the server and waits until it answers PING (after loading
// its snapshot, if any).
func (s *ownServer) start() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, s.args...)
	s.cmd.Env = []string{} // nothing of the test's environment
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("starting redis-server: %v", err)
	}
	exited := make(chan error, 1)
	go func(cmd *exec.Cmd) { exited <- cmd.Wait() }(s.cmd)
	probe := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer probe.Close()
	deadline := time.Now().Add(testutil.HangGuard)
	for {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redis-server on port %d exited: %v\n%s", s.port, err, log)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := probe.Ping(ctx).Err()
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on port %d does not answer: %v", s.port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.exited = exited // kill waits for it
}

// kill ends the server with SIGKILL: what it did not save is lost.
func (s *ownServer) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Restart kills the server and starts it again on the same port and
// directory: it comes back with its last snapshot.
func (s *ownServer) Restart() {
	s.t.Helper()
	s.kill()
	s.start()
}

// Save writes a snapshot (SAVE).
func (s *ownServer) Save() {
	s.t.Helper()
	if err := s.rdb.Save(context.Background()).Err(); err != nil {
		s.t.Fatalf("SAVE: %v", err)
	}
}

// Keys returns every key the server holds under prefix.
func (s *ownServer) Keys(prefix string) []string {
	s.t.Helper()
	keys, err := s.rdb.Keys(context.Background(), prefix+"*").Result()
	if err != nil {
		s.t.Fatalf("KEYS: %v", err)
	}
	return keys
}

// commandStats reads INFO commandstats: calls per command, lower case.
func (s *ownServer) commandStats() map[string]int64 {
	s.t.Helper()
	info, err := s.rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		s.t.Fatalf("INFO commandstats: %v", err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				out[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return out
}

// resetStats zeroes the server's statistics (CONFIG RESETSTAT).
func (s *ownServer) resetStats() {
	s.t.Helper()
	if err := s.rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		s.t.Fatalf("CONFIG RESETSTAT: %v", err)
	}
}

var errNoKey = errors.New("no such key")

// expireTime is a key's expiry (PEXPIRETIME): the zero time for a key
// without one, errNoKey for a missing key.
func (s *ownServer) expireTime(key string) (time.Time, error) {
	ms, err := s.rdb.Do(context.Background(), "PEXPIRETIME", key).Int64()
	switch {
	case err != nil:
		return time.Time{}, err
	case ms == -2:
		return time.Time{}, errNoKey
	case ms == -1:
		return time.Time{}, nil
	}
	return time.UnixMilli(ms), nil
}

// now is the server's clock (TIME).
func (s *ownServer) now() time.Time {
	s.t.Helper()
	t, err := s.rdb.Time(context.Background()).Result()
	if err != nil {
		s.t.Fatalf("TIME: %v", err)
	}
	return t
}
