// Package azuritetest runs Azurite, the Azure Storage emulator, for tests:
// its queue and blob services as two Node processes on free loopback ports,
// with their data in a temporary directory (on /dev/shm where there is
// one), stopped (with their whole process groups) when the tests end.
//
// Azurite is an npm package pinned in tools/azurite (package.json and its
// committed package-lock.json); `make test` installs it with
// `npm ci --prefix tools/azurite` before running go test. Tests that need
// it and find it missing fail with a message saying so; they never skip,
// so CI cannot pass without running them.
//
// A test binary shares one server:
//
//	func TestMain(m *testing.M) { os.Exit(azuritetest.Main(m)) }
//
//	func TestSomething(t *testing.T) {
//		srv := azuritetest.Shared(t) // started on first use
//		q, err := queue.Open(ctx, srv.URL("orders"))
//		…
//	}
//
// Start gives a test a server of its own, stopped at its cleanup.
// StartWith(tb, Options{OAuth: true}) starts one over HTTPS, with a
// certificate made for it, that accepts Microsoft Entra ID bearer tokens
// (Azurite's --oauth basic); TokenCredential mints tokens it accepts.
package azuritetest

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Azurite's well-known development account (published in Azure's docs; not
// a secret).
const (
	Account = "devstoreaccount1"
	Key     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// Version is the Azurite release tools/azurite pins.
const Version = "3.37.0"

// StartTimeout bounds how long Start waits for Azurite to listen: a hang
// guard only. Node loads Azurite in about a second on a quiet machine, but
// loading is all CPU: at load 16 on 2 cores it takes 10 s, and with a test
// binary's servers starting together beside other packages' tests (load
// 20 and more) it has exceeded a minute.
const StartTimeout = 3 * time.Minute

// ToolDir is where Azurite is installed, relative to the repository root.
const ToolDir = "tools/azurite"

// EnvDir overrides the directory holding Azurite's node_modules (default:
// ToolDir under the repository root found from the working directory).
const EnvDir = "ADAPTQ_AZURITE_DIR"

// EnvDebug names a directory where Azurite writes its debug logs
// (azurite-queue.log, azurite-blob.log), for investigating the emulator.
const EnvDebug = "ADAPTQ_AZURITE_DEBUG"

// Server is a running Azurite: a queue service and a blob service.
type Server struct {
	// QueueEndpoint and BlobEndpoint are the services' URLs for the
	// development account, e.g. http://127.0.0.1:41234/devstoreaccount1.
	QueueEndpoint, BlobEndpoint string
	// QueueAddr and BlobAddr are the host:port the services listen on.
	QueueAddr, BlobAddr string
	// TLS is whether the services serve HTTPS (Options.OAuth); then
	// RootCAs holds the certificate they present, and HTTPClient trusts
	// it.
	TLS     bool
	RootCAs *x509.CertPool

	mu    sync.Mutex
	procs []*proc // the queue service's first
	dir   string
	once  sync.Once
	bin   string
	extra []string
}

// URL is an azure:// URL of the queue called name on this server, with
// params (pairs of name and value) appended, e.g.
// URL("orders", "encoding", "text").
func (s *Server) URL(name string, params ...string) string {
	v := url.Values{}
	v.Set("endpoint", s.QueueEndpoint)
	v.Set("blob_endpoint", s.BlobEndpoint)
	for i := 0; i+1 < len(params); i += 2 {
		v.Set(params[i], params[i+1])
	}
	return "azure://" + Account + "/" + name + "?" + v.Encode()
}

// HTTPClient is a new HTTP client for this server: one that trusts its
// certificate if it serves HTTPS.
func (s *Server) HTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// A hang guard, not Go's default 10 s: a busy machine starves the
	// emulator's Node process of CPU for longer than that (TestEntra saw
	// "TLS handshake timeout" at load 20).
	t.TLSHandshakeTimeout = time.Minute
	if s.TLS {
		t.TLSClientConfig = &tls.Config{RootCAs: s.RootCAs, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: t}
}

// ConnectionString is a connection string for the development account on
// this server.
func (s *Server) ConnectionString() string {
	proto := "http"
	if s.TLS {
		proto = "https"
	}
	return "DefaultEndpointsProtocol=" + proto + ";AccountName=" + Account + ";AccountKey=" + Key +
		";QueueEndpoint=" + s.QueueEndpoint + ";BlobEndpoint=" + s.BlobEndpoint + ";"
}

// Stop ends both services (their process groups) and removes their
// working directory. It is safe to call more than once.
func (s *Server) Stop() {
	s.once.Do(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, p := range s.procs {
			p.stop()
		}
		if s.dir != "" {
			_ = os.RemoveAll(s.dir)
		}
	})
}

// PIDs are the service processes' ids (each leads its process group).
func (s *Server) PIDs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []int
	for _, p := range s.procs {
		ids = append(ids, p.cmd.Process.Pid)
	}
	return ids
}

// Options change how a server runs. The zero value is the default: plain
// HTTP, shared key and SAS only.
type Options struct {
	// OAuth serves HTTPS, with a self-signed certificate made for the
	// server (for 127.0.0.1 and localhost), and accepts Microsoft Entra
	// ID bearer tokens (Azurite's --oauth basic: it checks a token's
	// shape, lifetime, issuer and audience, not its signature). Shared
	// key and SAS keep working. Clients must trust RootCAs (HTTPClient
	// does).
	OAuth bool
}

// Start starts a server for tb alone and stops it at tb's cleanup. It
// fails tb if Azurite is not installed or does not start.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return StartWith(tb, Options{})
}

// StartWith is Start with options.
func StartWith(tb testing.TB, opts Options) *Server {
	tb.Helper()
	s, err := LaunchWith(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Prestart begins starting a server for tb (with opts) at once and
// returns a function that waits for it, failing tb if it did not start;
// the server stops at tb's cleanup. A parallel test calls it before
// t.Parallel(), so that Node loads Azurite (seconds of CPU, tens of
// seconds on a busy machine) while the serial tests run, not after them.
// The wait function must be called from a test's goroutine.
func Prestart(tb testing.TB, opts Options) func(testing.TB) *Server {
	tb.Helper()
	type result struct {
		s   *Server
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := LaunchWith(opts)
		ch <- result{s, err}
	}()
	var once sync.Once
	var r result
	wait := func() result {
		once.Do(func() { r = <-ch })
		return r
	}
	tb.Cleanup(func() {
		if r := wait(); r.s != nil {
			r.s.Stop()
		}
	})
	return func(tb testing.TB) *Server {
		tb.Helper()
		r := wait()
		if r.err != nil {
			tb.Fatal(r.err)
		}
		return r.s
	}
}

// shared holds the test binary's shared servers, one per Options.
var shared struct {
	sync.Mutex
	m map[Options]*sharedServer
}

type sharedServer struct {
	once sync.Once
	s    *Server
	err  error
}

// Shared returns the test binary's shared server, starting it on first use.
// Main stops it when the tests end.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	return SharedWith(tb, Options{})
}

// SharedWith is Shared for the shared server with opts (one per Options:
// SharedWith(tb, Options{OAuth: true}) is the binary's HTTPS server).
func SharedWith(tb testing.TB, opts Options) *Server {
	tb.Helper()
	s, err := SharedServerWith(opts)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// SharedServer is Shared for code without a testing.TB (examples,
// benchmarks' setup).
func SharedServer() (*Server, error) { return SharedServerWith(Options{}) }

// SharedServerWith is SharedWith for code without a testing.TB. Callers
// that come while the server is starting wait for it, so a parallel test
// may start it in a goroutine before t.Parallel() (Node loads Azurite
// while the serial tests run) and call SharedWith after.
func SharedServerWith(opts Options) (*Server, error) {
	shared.Lock()
	if shared.m == nil {
		shared.m = map[Options]*sharedServer{}
	}
	e := shared.m[opts]
	if e == nil {
		e = &sharedServer{}
		shared.m[opts] = e
	}
	shared.Unlock()
	e.once.Do(func() { e.s, e.err = LaunchWith(opts) })
	return e.s, e.err
}

// Main runs the tests of m and then stops the shared servers that were
// started; use it as TestMain's body: os.Exit(azuritetest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	shared.Lock()
	entries := shared.m
	shared.m = nil
	shared.Unlock()
	for _, e := range entries {
		e.once.Do(func() {}) // waits for a start under way
		if e.s != nil {
			e.s.Stop()
		}
	}
	return code
}

// Launch starts a server that the caller must Stop.
func Launch() (*Server, error) { return LaunchWith(Options{}) }

// LaunchWith is Launch with options.
func LaunchWith(opts Options) (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	base := workBase()
	removeStale(base)
	dir, err := os.MkdirTemp(base, workPrefix)
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin}
	var extra []string
	scheme := "http"
	if opts.OAuth {
		certFile, keyFile, pool, err := writeCert(dir)
		if err != nil {
			s.Stop()
			return nil, fmt.Errorf("azuritetest: certificate: %w", err)
		}
		s.TLS, s.RootCAs, scheme = true, pool, "https"
		extra = []string{"--cert", certFile, "--key", keyFile, "--oauth", "basic"}
	}
	s.extra = extra
	type result struct {
		svc  string
		p    *proc
		addr string
		err  error
	}
	ch := make(chan result, 2)
	for _, svc := range []string{"queue", "blob"} {
		go func() {
			p, addr, err := startService(bin, svc, filepath.Join(dir, svc), "0", extra, s.HTTPClient())
			ch <- result{svc, p, addr, err}
		}()
	}
	var errs []error
	for range 2 {
		r := <-ch
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		switch r.svc {
		case "queue":
			s.procs = append([]*proc{r.p}, s.procs...)
			s.QueueAddr = r.addr
			s.QueueEndpoint = scheme + "://" + r.addr + "/" + Account
		case "blob":
			s.procs = append(s.procs, r.p)
			s.BlobAddr = r.addr
			s.BlobEndpoint = scheme + "://" + r.addr + "/" + Account
		}
	}
	if len(errs) > 0 {
		s.Stop()
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// workPrefix starts the name of each server's data directory.
const workPrefix = "adaptq-azurite-"

// removeStale deletes data directories left by test binaries that were
// killed before they could stop their server (a timeout's panic runs no
// cleanup): those over a day old, longer than any test run.
func removeStale(base string) {
	if base == "" {
		base = os.TempDir()
	}
	ents, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), workPrefix) {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > 24*time.Hour {
			_ = os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
}

// workBase is where Azurite keeps its data: /dev/shm (memory) where
// there is one, else the temporary directory. Azurite's own in-memory mode
// is not used: its extent garbage collector, every 60 s, blocks the
// service for minutes once some ten thousand messages have come and gone
// (one extent per message, each deleted with an O(n) index update).
func workBase() string {
	const shm = "/dev/shm"
	if fi, err := os.Stat(shm); err == nil && fi.IsDir() {
		if f, err := os.CreateTemp(shm, "adaptq-probe-"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return shm
		}
	}
	return ""
}

// binDir finds node_modules/.bin of tools/azurite.
func binDir() (string, error) {
	var dir string
	if d := os.Getenv(EnvDir); d != "" {
		dir = d
	} else {
		root, err := repoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, filepath.FromSlash(ToolDir))
	}
	bin := filepath.Join(dir, "node_modules", ".bin")
	for _, name := range []string{"azurite-queue", "azurite-blob"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			return "", fmt.Errorf("azuritetest: Azurite %s is not installed in %s: run `make test` "+
				"(or `npm ci --prefix %s`) to install it; these tests need it and do not skip", Version, dir, ToolDir)
		}
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("azuritetest: node is not on PATH: Azurite %s needs Node.js (20 or newer)", Version)
	}
	return bin, nil
}

// repoRoot walks up from the working directory to the directory holding
// tools/azurite/package.json.
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
			return "", fmt.Errorf("azuritetest: no %s/package.json above %s (set %s to Azurite's directory)", ToolDir, wd, EnvDir)
		}
		d = parent
	}
}

// listening is the line Azurite prints once its port is bound.
var listening = regexp.MustCompile(`successfully listens on (https?)://([0-9.]+:[0-9]+)`)

// RestartQueue stops the queue service (SIGTERM, on which Azurite saves
// its database to the data directory) and starts it again on the same port
// and directory, so that it keeps what it saved: messages, their
// visibility and dequeue counts. Clients' connections are closed; the
// endpoint stays the same.
func (s *Server) RestartQueue() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.procs) == 0 {
		return errors.New("azuritetest: the server has stopped")
	}
	s.procs[0].stop()
	_, port, _ := strings.Cut(s.QueueAddr, ":")
	var err error
	for try := 0; try < 20; try++ { // the port may linger a moment
		var p *proc
		if p, _, err = startService(s.bin, "queue", filepath.Join(s.dir, "queue"), port, s.extra, s.HTTPClient()); err == nil {
			s.procs[0] = p
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("azuritetest: restart the queue service on port %s: %w", port, err)
}

// startService runs azurite-<svc> on port (0: a free one) of the loopback,
// with extra arguments, and reads the port it bound from its output;
// client checks that it answers.
func startService(bin, svc, dir, port string, extra []string, client *http.Client) (*proc, string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	args := []string{
		"--" + svc + "Host", "127.0.0.1",
		"--" + svc + "Port", port,
		"--location", dir,
		"--skipApiVersionCheck",
		"--loose",
		"--disableTelemetry",
		"--silent",
	}
	args = append(args, extra...)
	if d := os.Getenv(EnvDebug); d != "" {
		args = append(args, "--debug", filepath.Join(d, "azurite-"+svc+".log"))
	}
	cmd := exec.Command(filepath.Join(bin, "azurite-"+svc), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "AZURITE_ACCOUNTS=") // only the development account
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("azuritetest: start azurite-%s: %w", svc, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	addrCh := make(chan string, 1) // scheme://host:port
	var tail lineTail
	go func() {
		sc := bufio.NewScanner(out)
		found := false
		for sc.Scan() {
			line := sc.Text()
			if !found {
				tail.add(line)
				if m := listening.FindStringSubmatch(line); m != nil {
					found = true
					addrCh <- m[1] + "://" + m[2]
				}
			}
			// Keep reading (and dropping) the access log so the
			// service never blocks on a full pipe.
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	select {
	case base := <-addrCh:
		if err := waitHTTP(client, base); err != nil {
			p.stop()
			return nil, "", fmt.Errorf("azuritetest: azurite-%s on %s: %w", svc, base, err)
		}
		return p, strings.SplitN(base, "://", 2)[1], nil
	case <-p.done:
		return nil, "", fmt.Errorf("azuritetest: azurite-%s exited before listening: %s", svc, tail.String())
	case <-time.After(StartTimeout):
		p.stop()
		return nil, "", fmt.Errorf("azuritetest: azurite-%s did not listen within %s: %s", svc, StartTimeout, tail.String())
	}
}

// waitHTTP waits until the service at base (scheme://host:port) answers
// an HTTP request (any status).
func waitHTTP(client *http.Client, base string) error {
	c := *client
	c.Timeout = 2 * time.Second
	deadline := time.Now().Add(StartTimeout)
	for {
		resp, err := c.Get(base + "/" + Account + "?comp=list")
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

// proc is one Azurite process, the leader of its own process group.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// stop sends SIGTERM to the process group, then SIGKILL if it has not
// exited within a few seconds, and waits for it.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	killGroup(p.cmd, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		killGroup(p.cmd, syscall.SIGKILL)
		<-p.done
	}
	// Whatever else the group started goes too.
	killGroup(p.cmd, syscall.SIGKILL)
}

// lineTail keeps the last lines a service printed, for error messages.
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
