//go:build unix

package adaptq

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/queue"
)

// connsChild marks the test binary run as the worker of
// TestIdleAdminConnectionsCannotStarveHandlers.
const connsChild = "ADAPTQ_TEST_ADMIN_CONNS_CHILD"

// The connections the test opens to the child's admin endpoint, and the
// file descriptors the child has beyond those open when it starts: fewer
// than the connections, more than the endpoint's bound plus what an exec:
// handler needs.
const (
	connsKeepAlive = 300
	connsSilent    = 100
	connsFDMargin  = 100
	connsMessages  = 5
)

// Idle connections to the admin endpoint cannot take the file descriptors
// the handlers need (21,000 of them once used up 20,000, and every exec:
// handler failed with "too many open files"). A worker in a child process
// with few descriptors to spare (a low RLIMIT_NOFILE) serves its admin
// endpoint to 300 keep-alive connections left idle and 100 that send
// nothing, more than it has descriptors for; its exec: handler then still
// runs every message, and a probe from a new connection is served (once
// the silent connections time out: the timeouts are made short).
func TestIdleAdminConnectionsCannotStarveHandlers(t *testing.T) {
	if os.Getenv(connsChild) != "" {
		connsChildWorker(t)
		return
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestIdleAdminConnectionsCannotStarveHandlers$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), connsChild+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	lines := bufio.NewScanner(stdout)
	next := func(prefix string) string {
		for lines.Scan() {
			out.WriteString(lines.Text() + "\n")
			if after, ok := strings.CutPrefix(lines.Text(), prefix); ok {
				return after
			}
		}
		_ = cmd.Wait()
		t.Fatalf("the child ended before %q:\n%s", prefix, out.String())
		return ""
	}
	addr := next("ADDR ")

	// Keep-alive connections that made one request, and connections that
	// send nothing; none is closed by the client.
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for i := range connsKeepAlive + connsSilent {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if i < connsKeepAlive {
			if _, err := io.WriteString(c, "GET "+admin.HealthPath+" HTTP/1.1\r\nHost: "+addr+"\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	var processed, failed int
	if _, err := fmt.Sscanf(next("RESULT "), "processed=%d failed=%d", &processed, &failed); err != nil {
		t.Fatal(err)
	}
	if processed != connsMessages || failed != 0 {
		t.Errorf("with %d idle admin connections: %d of %d messages processed, %d handler runs failed; want every one processed\n%s",
			connsKeepAlive+connsSilent, processed, connsMessages, failed, out.String())
	}

	// A probe from a new connection is served.
	ctx, cancel := context.WithTimeout(context.Background(), testutil.HangGuard)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+admin.HealthPath, nil)
	tr := &http.Transport{DisableKeepAlives: true}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Errorf("GET %s from a new connection: %v", admin.HealthPath, err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s from a new connection: %s", admin.HealthPath, resp.Status)
		}
	}
	_, _ = io.WriteString(stdin, "done\n")
	_ = stdin.Close()
	for lines.Scan() {
		out.WriteString(lines.Text() + "\n")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the child: %v\n%s", err, out.String())
	}
}

// connsChildWorker runs in the child: a worker with an exec: handler and
// an admin endpoint with short timeouts, whose descriptors are limited to
// connsFDMargin beyond those open. It prints its admin address, waits for
// the parent's connections ("go"), runs connsMessages messages, prints
// what became of them and waits for "done".
func connsChildWorker(t *testing.T) {
	name := uniqueQueue("admin-conns")
	cfg := testConfig(t, `
admin: {address: "127.0.0.1:0"}
queues: [{url: 'memory://`+name+`', handler: 'exec: true', max_dequeue_count: 100}]
`)
	w, err := New(cfg, WithLogger(zap.NewNop()), withAdminOptions(func(o *admin.Options) {
		o.ReadHeaderTimeout, o.IdleTimeout = 200*time.Millisecond, 200*time.Millisecond
	}))
	if err != nil {
		t.Fatal(err)
	}
	runWorker(t, w)
	l, _ := w.Listener(name)

	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir("/dev/fd")
	lim.Cur = uint64(len(entries) + connsFDMargin)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("setrlimit: %v", err)
	}
	fmt.Printf("ADDR %s\n", w.AdminAddress())
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() || in.Text() != "go" {
		t.Fatalf("the parent said %q, want go", in.Text())
	}
	for i := range connsMessages {
		if _, err := w.Put(context.Background(), name, fmt.Appendf(nil, "job-%d", i), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, time.Minute, "every message is processed or a run fails", func() bool {
		s := l.Stats()
		return s.Processed == connsMessages || s.Failed > 0
	})
	s := l.Stats()
	fmt.Printf("RESULT processed=%d failed=%d\n", s.Processed, s.Failed)
	in.Scan() // "done", or the parent ended
}
