// Package sqstest runs fauxqs, an Amazon SQS emulator, for tests: one Node
// process bound to a free loopback port, all state in memory, stopped
// (with its whole process group) when the tests end.
//
// fauxqs is an npm package pinned in tools/fauxqs (package.json and its
// committed package-lock.json), started by tools/fauxqs/launch.mjs, which
// binds 127.0.0.1 (fauxqs's own CLI binds 0.0.0.0). `make test` installs
// it with `npm ci --prefix tools/fauxqs` before running go test. Tests that
// need it and find it missing fail with a message saying so; they never
// skip, so CI cannot pass without running them.
//
// A test binary shares one server:
//
//	func TestMain(m *testing.M) { os.Exit(sqstest.Main(m)) }
//
//	func TestSomething(t *testing.T) {
//		srv := sqstest.Shared(t) // started on first use
//		q, err := queue.Open(ctx, srv.URL(sqstest.NewRegion(), "orders"))
//		…
//	}
//
// fauxqs keeps queues apart by region, so a test that wants queues of its
// own (and a second run of the same test, with -count=2) takes a fresh
// region from NewRegion. Requests must then be signed for the region to
// be read: Launch sets the environment's AWS credentials to dummy ones
// (the emulator checks none) for the credential chain to find.
package sqstest

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Version is the fauxqs release tools/fauxqs pins (2.x needs Node 22.5).
const Version = "1.9.2"

// Account is the account id fauxqs puts in every queue URL.
const Account = "000000000000"

// StartTimeout bounds how long Launch waits for fauxqs to listen.
const StartTimeout = 60 * time.Second

// ToolDir is where fauxqs is installed, relative to the repository root.
const ToolDir = "tools/fauxqs"

// EnvDir overrides the directory holding launch.mjs and fauxqs's
// node_modules (default: ToolDir under the repository root found from the
// working directory).
const EnvDir = "ADAPTQ_FAUXQS_DIR"

// Server is a running fauxqs.
type Server struct {
	// Endpoint is its URL, e.g. http://127.0.0.1:41234; Addr the host:port.
	Endpoint, Addr string

	cmd          *exec.Cmd
	done         chan struct{}
	once         sync.Once
	clockControl bool
}

// SetClockOffset sets the server's clock to the system's plus d (negative:
// behind), from now on, for every time it keeps (sent timestamps,
// visibility timeouts, delays) and the Date of its answers. The server
// must have been started with Options.ClockControl. Moving a clock that
// others' tests read would break them: use a server of the test's own.
func (s *Server) SetClockOffset(d time.Duration) error {
	if !s.clockControl {
		return errors.New("sqstest: the server was started without Options.ClockControl")
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(s.Endpoint + "/_adaptq/clock?offset_ms=" + strconv.FormatInt(d.Milliseconds(), 10))
	if err != nil {
		return fmt.Errorf("sqstest: set the clock offset: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("sqstest: set the clock offset: HTTP %d", resp.StatusCode)
	}
	return nil
}

var regions atomic.Int64
var runID = func() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}()

// NewRegion returns a region name no other call of this process, nor any
// other run, returns: queues in it are a test's own.
func NewRegion() string {
	return fmt.Sprintf("t%s-%d", runID, regions.Add(1))
}

// URL is an sqs:// URL of the queue called name in region on this server,
// with params (pairs of name and value) appended, e.g.
// URL(region, "orders", "create", "false").
func (s *Server) URL(region, name string, params ...string) string {
	v := url.Values{}
	v.Set("endpoint", s.Endpoint)
	for i := 0; i+1 < len(params); i += 2 {
		v.Set(params[i], params[i+1])
	}
	return "sqs://" + region + "/" + Account + "/" + name + "?" + v.Encode()
}

// Stop ends the server (its process group). It is safe to call more than
// once.
func (s *Server) Stop() {
	s.once.Do(func() {
		select {
		case <-s.done:
			return
		default:
		}
		killGroup(s.cmd, syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			killGroup(s.cmd, syscall.SIGKILL)
			<-s.done
		}
		killGroup(s.cmd, syscall.SIGKILL)
	})
}

// PID is the server process's id (it leads its process group).
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Start starts a server for tb alone and stops it at tb's cleanup.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := Launch()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

var shared struct {
	sync.Mutex
	s   *Server
	err error
}

// Shared returns the test binary's shared server, starting it on first use.
// Main stops it when the tests end.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	s, err := SharedServer()
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// SharedServer is Shared for code without a testing.TB.
func SharedServer() (*Server, error) {
	shared.Lock()
	defer shared.Unlock()
	if shared.s == nil && shared.err == nil {
		shared.s, shared.err = Launch()
	}
	return shared.s, shared.err
}

// Main runs the tests of m and then stops the shared server, if one was
// started; use it as TestMain's body: os.Exit(sqstest.Main(m)).
func Main(m *testing.M) int {
	UseDummyCredentials()
	code := m.Run()
	shared.Lock()
	if shared.s != nil {
		shared.s.Stop()
	}
	shared.Unlock()
	return code
}

// UseDummyCredentials points the AWS credential chain of this process at
// dummy credentials (the emulator checks none) and turns the EC2 metadata
// service off, so nothing reaches for a real account.
func UseDummyCredentials() {
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":         "fauxqs",
		"AWS_SECRET_ACCESS_KEY":     "fauxqs",
		"AWS_SESSION_TOKEN":         "",
		"AWS_PROFILE":               "",
		"AWS_EC2_METADATA_DISABLED": "true",
	} {
		_ = os.Setenv(k, v)
	}
}

// Options are a server's settings beyond the defaults.
type Options struct {
	// ClockControl lets SetClockOffset move the server's clock.
	ClockControl bool
}

// Launch starts a server that the caller must Stop.
func Launch() (*Server, error) { return LaunchWith(Options{}) }

// StartWith is Start with options.
func StartWith(tb testing.TB, o Options) *Server {
	tb.Helper()
	s, err := LaunchWith(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// LaunchWith is Launch with options.
func LaunchWith(o Options) (*Server, error) {
	dir, err := toolDir()
	if err != nil {
		return nil, err
	}
	UseDummyCredentials()
	cmd := exec.Command("node", "launch.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FAUXQS_PORT=0", "FAUXQS_CLOCK_CONTROL=")
	if o.ClockControl {
		cmd.Env[len(cmd.Env)-1] = "FAUXQS_CLOCK_CONTROL=1"
	}
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("sqstest: start fauxqs: %w", err)
	}
	s := &Server{cmd: cmd, done: make(chan struct{}), clockControl: o.ClockControl}
	addrCh := make(chan string, 1)
	var tail lineTail
	go func() {
		sc := bufio.NewScanner(out)
		found := false
		for sc.Scan() {
			if !found {
				tail.add(sc.Text())
				if m := listening.FindStringSubmatch(sc.Text()); m != nil {
					found = true
					addrCh <- m[1]
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	select {
	case addr := <-addrCh:
		s.Addr, s.Endpoint = addr, "http://"+addr
		if err := waitHTTP(addr); err != nil {
			s.Stop()
			return nil, fmt.Errorf("sqstest: fauxqs on %s: %w", addr, err)
		}
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("sqstest: fauxqs exited before listening: %s", tail.String())
	case <-time.After(StartTimeout):
		s.Stop()
		return nil, fmt.Errorf("sqstest: fauxqs did not listen within %s: %s", StartTimeout, tail.String())
	}
}

var listening = regexp.MustCompile(`fauxqs listening on http://([0-9.]+:[0-9]+)`)

func waitHTTP(addr string) error {
	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(StartTimeout)
	for {
		resp, err := c.Get("http://" + addr + "/health")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// toolDir finds tools/fauxqs with fauxqs installed in it.
func toolDir() (string, error) {
	dir := os.Getenv(EnvDir)
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, filepath.FromSlash(ToolDir))
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "fauxqs", "package.json")); err != nil {
		return "", fmt.Errorf("sqstest: fauxqs %s is not installed in %s: run `make test` "+
			"(or `npm ci --prefix %s`) to install it; these tests need it and do not skip", Version, dir, ToolDir)
	}
	if _, err := os.Stat(filepath.Join(dir, "launch.mjs")); err != nil {
		return "", fmt.Errorf("sqstest: %s has no launch.mjs", dir)
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "", errors.New("sqstest: node is not on PATH: fauxqs needs Node.js (20 or newer)")
	}
	return dir, nil
}

// repoRoot walks up from the working directory to the directory holding
// tools/fauxqs/package.json.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; {
		if _, err := os.Stat(filepath.Join(d, filepath.FromSlash(ToolDir), "package.json")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("sqstest: no %s/package.json above %s (set %s to its directory)", ToolDir, wd, EnvDir)
		}
		d = parent
	}
}

// lineTail keeps the last lines the server printed, for error messages.
type lineTail struct {
	mu    sync.Mutex
	lines []string
}

func (t *lineTail) add(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, s)
	if len(t.lines) > 20 {
		t.lines = t.lines[1:]
	}
}

func (t *lineTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return "(no output)"
	}
	return strings.Join(t.lines, " | ")
}
