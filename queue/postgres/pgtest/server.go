//go:build unix

package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is a PostgreSQL server of a test's own, in a scratch directory on
// a free loopback port: for the cases that restart or crash the server,
// which the machine's shared server must not suffer.
type Server struct {
	// URL connects to its database postgres as the superuser postgres.
	URL string

	bin, dir, data string
	port           int
	settings       []string            // "-c name=value" options of every start
	cred           *syscall.Credential // the unprivileged user it runs as, when the test runs as root
}

// StartServer initialises and starts a server of the test's own with the
// PostgreSQL binaries of the machine, and stops it when the test ends. It
// skips the test (fails it under CI=true) where there are no binaries, or
// where the test runs as root and there is no postgres user to run it as.
// settings ("name=value") are passed to the server as -c options at
// every start.
func StartServer(t testing.TB, settings ...string) *Server {
	t.Helper()
	skip := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf("pgtest: cannot start a server of the test's own, and CI=true: "+format, args...)
		}
		t.Skipf("pgtest: cannot start a server of the test's own: "+format, args...)
	}
	bin, err := binDir()
	if err != nil {
		skip("%v", err)
	}
	s := &Server{bin: bin}
	for _, kv := range settings {
		s.settings = append(s.settings, "-c "+kv)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			skip("running as root, and no postgres user to run the server as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if s.dir, err = os.MkdirTemp("", "adaptq-pgtest-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(s.dir) })
	if s.cred != nil {
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	s.data = filepath.Join(s.dir, "data")
	if out, err := s.run("initdb", "-D", s.data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--no-instructions"); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	if s.port, err = freePort(); err != nil {
		t.Fatal(err)
	}
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
	if err := s.start(); err != nil {
		t.Fatalf("pgtest: start the server: %v", err)
	}
	t.Cleanup(func() { _, _ = s.run("pg_ctl", "-D", s.data, "-m", "immediate", "-w", "stop") })
	return s
}

// Restart stops the server and starts it again on the same port. With
// crash, the stop is an immediate shutdown (every process killed without
// a checkpoint, as a power cut leaves the data directory): the start then
// recovers from the WAL, keeping what was committed and flushed.
func (s *Server) Restart(t testing.TB, crash bool) {
	t.Helper()
	mode := "fast"
	if crash {
		mode = "immediate"
	}
	if out, err := s.run("pg_ctl", "-D", s.data, "-m", mode, "-w", "stop"); err != nil {
		t.Fatalf("pgtest: stop the server: %v\n%s", err, out)
	}
	if err := s.start(); err != nil {
		t.Fatalf("pgtest: start the server again: %v", err)
	}
}

func (s *Server) start() error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c shared_buffers=16MB -c max_connections=100 -c fsync=on", s.port, s.dir)
	if len(s.settings) > 0 {
		opts += " " + strings.Join(s.settings, " ")
	}
	if out, err := s.run("pg_ctl", "-D", s.data, "-l", filepath.Join(s.dir, "log"), "-o", opts, "-w", "-t", "120", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		return fmt.Errorf("%v\n%s\n%s", err, out, log)
	}
	// pg_ctl -w waits for the server to accept connections.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		return err
	}
	return c.Close(ctx)
}

// run runs one of the server's programs, as the unprivileged user if the
// test runs as root.
func (s *Server) run(prog string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(s.bin, prog), args...)
	cmd.Dir = os.TempDir()
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd.CombinedOutput()
}

// binDir finds the directory of initdb, pg_ctl and postgres: pg_config's,
// else the newest /usr/lib/postgresql/*/bin.
func binDir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	ds, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(ds) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(ds[i], "initdb")); err == nil {
			return ds[i], nil
		}
	}
	return "", fmt.Errorf("no initdb (pg_config --bindir, /usr/lib/postgresql/*/bin)")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
