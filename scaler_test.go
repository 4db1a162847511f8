package adaptq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/scaling"
)

// startScaler runs a scaler on yaml until the test ends.
func startScaler(t *testing.T, yaml string, opts ...Option) *Scaler {
	t.Helper()
	s, err := NewScaler(testConfig(t, yaml), append([]Option{WithLogger(zap.NewNop())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-s.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("Run: %v", err)
	case <-time.After(testutil.HangGuard):
		cancel()
		t.Fatal("scaler did not start")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(testutil.HangGuard):
			t.Error("Run did not return")
		}
	})
	return s
}

// countCalls is the Count calls the scaler made to its queue name.
func (s *Scaler) countCalls(name string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sq := range s.queues {
		if sq.name == name {
			return sq.meter.Snapshot().Calls[meter.Count]
		}
	}
	return -1
}

// signal GETs the scaler's signal with token and decodes it.
func scalerSignal(t *testing.T, s *Scaler, token string) (int, admin.Scaling, string) {
	t.Helper()
	resp, b := adminSend(t, s.Address(), http.MethodGet, admin.ScalingPath, nil, bearer(token)...)
	var sig admin.Scaling
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusServiceUnavailable {
		if err := json.Unmarshal(b, &sig); err != nil {
			t.Fatalf("GET %s: %s: %v\n%s", admin.ScalingPath, resp.Status, err, b)
		}
	}
	return resp.StatusCode, sig, string(b)
}

// approximate reports a count that is not exact (SQS, Azure, PostgreSQL).
type approximate struct{ driver.Queue }

func (a approximate) Features() driver.Features {
	f := a.Queue.Features()
	f.ExactCount = false
	return f
}

// The scaler, with no worker running: 0 for an empty queue, one instance
// for a message a consumer holds (Count includes hidden messages), N for a
// backlog, and 0 again once it is gone.
func TestScalerAnswersZeroForAnEmptyQueueAndNForABacklog(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("scaler-zero")
	url := "memory://" + name
	fake := clock.NewFake(time.Time{})
	const token = "scaler-Zq8wPd3LmK"
	s := startScaler(t, `
admin: {address: "127.0.0.1:0", token: `+token+`}
queues:
  - url: `+url+`
    handler: 'exec: cat'
    instances: {messages_per_instance: 100, max: 20}
`, withClock(fake))
	want := func(what string, desired int, basis scaling.Basis, depth int) {
		t.Helper()
		code, sig, body := scalerSignal(t, s, token)
		if code != http.StatusOK || sig.DesiredInstances != desired || len(sig.Queues) != 1 ||
			sig.Queues[0].Basis != basis || sig.Queues[0].Depth != depth || sig.Queues[0].Name != name {
			t.Fatalf("%s: %d %s\nwant desired %d (%s), depth %d", what, code, body, desired, basis, depth)
		}
		fake.Advance(ScalerDepthIntervalFree)
	}
	want("empty queue", 0, scaling.BasisEmpty, 0)

	q, err := queue.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	if _, err := q.Put(ctx, []byte("m"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := q.Get(ctx, 1, time.Hour)
	if err != nil || len(got) != 1 {
		t.Fatalf("get: %v %v", got, err)
	}
	want("one message in flight, nothing visible", 1, scaling.BasisMessagesPerInstance, 1)
	if err := q.Delete(ctx, got[0].ID, got[0].PopReceipt); err != nil {
		t.Fatal(err)
	}
	want("deleted", 0, scaling.BasisEmpty, 0)
	putN(t, url, 450)
	want("450 waiting, 100 an instance", 5, scaling.BasisMessagesPerInstance, 450)
	putN(t, url, 5000)
	want("5,450 waiting, max 20", 20, scaling.BasisMessagesPerInstance, 5450)
	if err := q.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	want("cleared", 0, scaling.BasisEmpty, 0)
}

// Where the count is approximate a zero may hide a message just put (SQS:
// up to a minute): the scaler answers 0 only once the queue has read zero
// for scaling.DefaultApproximateZeroHold, and one message starts the
// hold again.
func TestScalerWaitsForAnApproximateZeroToHold(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("scaler-approx")
	url := "memory://" + name
	fake := clock.NewFake(time.Time{})
	s := startScaler(t, `
admin: {address: "127.0.0.1:0"}
queues:
  - url: `+url+`
    handler: 'exec: cat'
`, withClock(fake), withQueueOptions(queue.WithWrapper(func(d driver.Queue) driver.Queue { return approximate{d} })))
	at := func(what string, desired int, basis scaling.Basis) {
		t.Helper()
		sig, err := s.Scaling(context.Background())
		if err != nil || sig.DesiredInstances != desired || sig.Queues[0].Basis != basis {
			t.Fatalf("%s: %+v %v; want %d (%s)", what, sig, err, desired, basis)
		}
	}
	at("first zero", 1, scaling.BasisEmptyUnconfirmed)
	fake.Advance(scaling.DefaultApproximateZeroHold - time.Second)
	at("zero for 59 s", 1, scaling.BasisEmptyUnconfirmed)
	fake.Advance(time.Second)
	at("zero for a minute", 0, scaling.BasisEmpty)
	putN(t, url, 1)
	fake.Advance(time.Second)
	at("one message", 1, scaling.BasisMessagesPerInstance)
	q, err := queue.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Clear(context.Background()); err != nil {
		t.Fatal(err)
	}
	fake.Advance(time.Second)
	at("zero again", 1, scaling.BasisEmptyUnconfirmed)
	fake.Advance(scaling.DefaultApproximateZeroHold)
	at("zero again for a minute", 0, scaling.BasisEmpty)
}

// 100 requests a second for a minute, in virtual time: a billed queue's
// depth is read once per ScalingDepthInterval (6 in the minute), a free
// one's once per ScalerDepthIntervalFree (60).
func TestScalerBoundsBackendCallsPerMinute(t *testing.T) {
	t.Parallel()
	billedName, freeName := uniqueQueue("scaler-billed"), uniqueQueue("scaler-free")
	fake := clock.NewFake(time.Time{})
	s := startScaler(t, `
admin: {address: "127.0.0.1:0"}
queues:
  - url: memory://`+billedName+`
    handler: 'exec: cat'
  - url: memory://`+freeName+`
    handler: 'exec: cat'
`, withClock(fake), withQueueOptions(queue.WithWrapper(func(d driver.Queue) driver.Queue {
		if strings.HasPrefix(d.Name(), "scaler-billed") {
			return billed{d}
		}
		return d
	})))
	for range 60 * 100 {
		if _, err := s.Scaling(context.Background()); err != nil {
			t.Fatal(err)
		}
		fake.Advance(10 * time.Millisecond)
	}
	if n := s.countCalls(billedName); n != 6 {
		t.Errorf("billed queue: %d Count calls in a minute at 100 requests a second, want 6", n)
	}
	if n := s.countCalls(freeName); n != 60 {
		t.Errorf("free queue: %d Count calls in a minute at 100 requests a second, want 60", n)
	}
}

// slowCount holds every Count until release is closed, counting them.
type slowCount struct {
	driver.Queue
	calls   *atomic.Int64
	started chan struct{}
	release chan struct{}
	err     error
}

func (c slowCount) Count(ctx context.Context) (int, error) {
	if c.calls.Add(1) == 1 && c.started != nil {
		close(c.started)
	}
	select {
	case <-c.release:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if c.err != nil {
		return 0, c.err
	}
	return c.Queue.Count(ctx)
}

// Requests that arrive while a depth read is in flight share it: 40
// concurrent requests over HTTP, one Count.
func TestScalerRequestsShareTheReadInFlight(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("scaler-share")
	var calls atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	s := startScaler(t, `
admin: {address: "127.0.0.1:0"}
queues:
  - url: memory://`+name+`
    handler: 'exec: cat'
`, withClock(clock.NewFake(time.Time{})), withQueueOptions(queue.WithWrapper(func(d driver.Queue) driver.Queue {
		return slowCount{Queue: d, calls: &calls, started: started, release: release}
	})))
	var wg sync.WaitGroup
	codes := make(chan int, 40)
	for range 40 {
		wg.Go(func() {
			resp, _ := adminSend(t, s.Address(), http.MethodGet, admin.ScalingPath, nil)
			codes <- resp.StatusCode
		})
	}
	<-started
	close(release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("a request got %d", c)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("40 concurrent requests made %d Count calls, want 1", n)
	}
}

// The scaler's endpoint has the admin endpoint's token rules: without the
// token, a wrong one, or from another site, a request costs no backend
// call; wrong tokens are throttled; the probes stay open and cost nothing;
// nothing but the signal and the probes is served.
func TestScalerHasTheAdminTokenRules(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("scaler-token")
	const token = "scaler-Hk4vN7qR2xWb"
	s := startScaler(t, `
admin: {address: "127.0.0.1:0", token: `+token+`}
queues:
  - url: memory://`+name+`
    handler: 'exec: cat'
`, withClock(clock.NewFake(time.Time{})))
	addr := s.Address()
	for range 200 {
		if c := adminRequest(t, addr, "GET", admin.ScalingPath, "", ""); c != http.StatusUnauthorized {
			t.Fatalf("no token: %d, want 401", c)
		}
	}
	for _, p := range []string{admin.HealthPath, admin.ReadyPath} {
		if c := adminRequest(t, addr, "GET", p, "", ""); c != http.StatusOK {
			t.Errorf("GET %s without the token: %d, want 200", p, c)
		}
	}
	if c := adminRequest(t, addr, "GET", admin.ScalingPath, "", "", append(bearer(token), "Sec-Fetch-Site", "cross-site")...); c != http.StatusForbidden {
		t.Errorf("from another site, with the token: %d, want 403", c)
	}
	if n := s.countCalls(name); n != 0 {
		t.Fatalf("requests without the token, probes and a cross-site request made %d Count calls, want 0", n)
	}
	for _, p := range []string{admin.StatsPath, admin.MetricsPath, "/", "/v1/poison/" + name} {
		if c := adminRequest(t, addr, "GET", p, "", "", bearer(token)...); c != http.StatusNotFound {
			t.Errorf("GET %s with the token: %d, want 404 (the scaler serves the signal alone)", p, c)
		}
	}
	if c := adminRequest(t, addr, "POST", strings.Replace(admin.TriggerPath, "{name}", name, 1), "", "", bearer(token)...); c != http.StatusNotFound && c != http.StatusMethodNotAllowed {
		t.Errorf("POST trigger: %d, want 404 or 405", c)
	}
	if c, _, body := scalerSignal(t, s, token); c != http.StatusOK {
		t.Fatalf("with the token: %d %s", c, body)
	}
	// Wrong tokens: AuthFailureBurst answered 401, then 429, the right
	// token too, from that address.
	for i := range admin.AuthFailureBurst {
		if c := adminRequest(t, addr, "GET", admin.ScalingPath, "", "", bearer(fmt.Sprintf("wrong-%d-Tk8vQ2mZx", i))...); c != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i, c)
		}
	}
	if c := adminRequest(t, addr, "GET", admin.ScalingPath, "", "", bearer("wrong-last-Tk8vQ2mZx")...); c != http.StatusTooManyRequests {
		t.Errorf("a wrong token beyond the burst: %d, want 429", c)
	}
	if n := s.countCalls(name); n != 1 {
		t.Errorf("%d Count calls, want the one the right token's request made", n)
	}
}

// Without a token the scaler answers only requests that name it by its
// address or a loopback name: a web page that rebinds its own name to
// 127.0.0.1 cannot read it (nor make it read the queue).
func TestScalerWithoutATokenRefusesOtherHosts(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("scaler-host")
	s := startScaler(t, `
admin: {address: "127.0.0.1:0"}
queues:
  - url: memory://`+name+`
    handler: 'exec: cat'
`)
	if c := adminRequest(t, s.Address(), "GET", admin.ScalingPath, "attacker.example:8089", ""); c != http.StatusForbidden {
		t.Errorf("Host attacker.example: %d, want 403", c)
	}
	if n := s.countCalls(name); n != 0 {
		t.Errorf("a refused request made %d Count calls", n)
	}
	if c := adminRequest(t, s.Address(), "GET", admin.ScalingPath, "localhost", ""); c != http.StatusOK {
		t.Errorf("Host localhost: %d, want 200", c)
	}
}

// A scaler refuses, at start-up (the config's checks, which are the
// worker's, or the endpoint's), an address not on loopback without a
// token, a token anyone could guess, and no address at all.
func TestScalerRefusesAnOpenEndpoint(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("scaler-open")
	for _, c := range []struct{ admin, want string }{
		{`{address: "0.0.0.0:0"}`, "not a loopback address"},
		{`{address: "127.0.0.1:0", token: change-me-please-now}`, "weak admin token"},
		{`{address: ""}`, "admin.address"},
	} {
		cfg, err := parseConfig("test.yaml", []byte("admin: "+c.admin+"\nqueues:\n  - url: memory://"+name+"\n    handler: 'exec: cat'\n"), nil)
		var s *Scaler
		if err == nil {
			s, err = NewScaler(cfg, WithLogger(zap.NewNop()))
		}
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), testutil.HangGuard)
			err = s.Run(ctx)
			cancel()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("admin %s: %v, want an error saying %q", c.admin, err, c.want)
		}
	}
}

// A depth that cannot be read answers 503 (KEDA keeps its count, or its
// fallback), and the error shown hides the backend's secrets; a failing
// backend is asked again an interval later, not at every request.
func TestScalerDepthErrorsHideSecrets(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("scaler-secret")
	var calls atomic.Int64
	release := make(chan struct{})
	close(release)
	leak := errors.New(`GET https://acct.queue.core.windows.net/q?sv=2021&sig=S3cr3tS1gnature%3D: 403; password=hunter2Xy`)
	fake := clock.NewFake(time.Time{})
	var logged testutil.SyncBuffer
	s := startScaler(t, `
admin: {address: "127.0.0.1:0"}
queues:
  - url: memory://`+name+`
    handler: 'exec: cat'
`, withClock(fake), withQueueOptions(queue.WithWrapper(func(d driver.Queue) driver.Queue {
		return billed{slowCount{Queue: d, calls: &calls, release: release, err: leak}}
	})), WithLogger(zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), &logged, zap.DebugLevel))))
	for range 100 {
		code, sig, body := scalerSignal(t, s, "")
		if code != http.StatusServiceUnavailable || len(sig.Queues) != 1 || sig.Queues[0].DepthError == "" {
			t.Fatalf("a failing depth: %d %s, want 503 with the error", code, body)
		}
		for _, secret := range []string{"S3cr3tS1gnature", "hunter2Xy"} {
			if strings.Contains(body, secret) {
				t.Fatalf("the answer shows the secret %q:\n%s", secret, body)
			}
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("100 requests to a failing billed backend made %d calls, want 1 per interval", n)
	}
	log := logged.String()
	if lines := strings.Count(log, "depth failed"); lines != 1 {
		t.Errorf("%d log lines for one failed read, want 1:\n%s", lines, log)
	}
	for _, secret := range []string{"S3cr3tS1gnature", "hunter2Xy"} {
		if strings.Contains(log, secret) {
			t.Errorf("the log shows the secret %q:\n%s", secret, log)
		}
	}
}

// The endpoint holds at most admin.max_connections: silent connections
// (a request's first line and never the rest) beyond it are closed, and
// they do not keep the autoscaler out (the longest idle is closed for it).
func TestScalerSurvivesSilentConnections(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("scaler-conns")
	const limit, opened = 4, 20
	s := startScaler(t, `
admin: {address: "127.0.0.1:0", max_connections: 4}
queues:
  - url: memory://`+name+`
    handler: 'exec: cat'
`)
	var conns []net.Conn
	for range opened {
		c, err := net.Dial("tcp", s.Address())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_, _ = c.Write([]byte("GET " + admin.ScalingPath + " HTTP/1.1\r\n"))
		conns = append(conns, c)
	}
	if code, _, body := scalerSignal(t, s, ""); code != http.StatusOK {
		t.Fatalf("after %d silent connections: %d %s", opened, code, body)
	}
	open := 0
	for _, c := range conns {
		if !closedByPeer(t, c) {
			open++
		}
	}
	if open > limit {
		t.Errorf("the scaler holds %d of %d silent connections open, want at most %d", open, opened, limit)
	}
}

// closedByPeer reports whether the server closed c: a read finds the end
// of the stream (or a reset). One it keeps has nothing to read: the short
// deadline only ends that wait, it decides nothing about time.
func closedByPeer(t *testing.T, c net.Conn) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// barrierCount holds each Count until every queue of the barrier has
// begun one: read one after another, the first would wait for the
// others until its read timed out.
type barrierCount struct {
	driver.Queue
	b *countBarrier
}

type countBarrier struct {
	mu    sync.Mutex
	left  int
	ready chan struct{}
}

func (c barrierCount) Count(ctx context.Context) (int, error) {
	c.b.mu.Lock()
	if c.b.left--; c.b.left == 0 {
		close(c.b.ready)
	}
	c.b.mu.Unlock()
	select {
	case <-c.b.ready:
		return c.Queue.Count(ctx)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// One request reads its queues' depths at once, not one after another:
// KEDA's metrics-api gives up after 3 s (KEDA_HTTP_DEFAULT_TIMEOUT), so a
// signal that took the sum of its reads would fail every poll of a config
// with many queues (and KEDA would hold its fallback, whatever the
// backlog).
func TestScalerReadsItsQueuesAtOnce(t *testing.T) {
	t.Parallel()
	names := []string{uniqueQueue("scaler-par"), uniqueQueue("scaler-par"), uniqueQueue("scaler-par")}
	bar := &countBarrier{left: len(names), ready: make(chan struct{})}
	yaml := "admin: {address: \"127.0.0.1:0\"}\nqueues:\n"
	for _, n := range names {
		yaml += "  - url: memory://" + n + "\n    handler: 'exec: cat'\n    instances: {messages_per_instance: 100}\n"
	}
	putN(t, "memory://"+names[2], 250)
	s := startScaler(t, yaml, withClock(clock.NewFake(time.Time{})), withQueueOptions(queue.WithWrapper(func(d driver.Queue) driver.Queue {
		return billed{barrierCount{Queue: d, b: bar}}
	})))
	sig, err := s.Scaling(context.Background())
	if err != nil || len(sig.Queues) != 3 {
		t.Fatalf("%+v %v", sig, err)
	}
	for i, q := range sig.Queues {
		if q.Name != names[i] {
			t.Errorf("queue %d is %q, want %q (the config's order)", i, q.Name, names[i])
		}
	}
	if sig.Queues[2].Depth != 250 || sig.DesiredInstances != 3 {
		t.Errorf("%+v, want the third queue's 250 (3 instances)", sig)
	}
}

// panicOnce panics in its first Count (a driver's bug).
type panicOnce struct {
	driver.Queue
	calls *atomic.Int64
}

func (p panicOnce) Count(ctx context.Context) (int, error) {
	if p.calls.Add(1) == 1 {
		panic("driver bug")
	}
	return p.Queue.Count(ctx)
}

// A Count that panics reaches the request that read it (net/http recovers
// it: the process goes on), not a goroutine of the scaler's (which would
// end the process), and the signal reads the queue again an interval
// later instead of waiting for that read for ever.
func TestScalerSurvivesACountThatPanics(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("scaler-panic")
	var calls atomic.Int64
	fake := clock.NewFake(time.Time{})
	putN(t, "memory://"+name, 7)
	s := startScaler(t, `
admin: {address: "127.0.0.1:0"}
queues:
  - url: memory://`+name+`
    handler: 'exec: cat'
`, withClock(fake), withQueueOptions(queue.WithWrapper(func(d driver.Queue) driver.Queue {
		return billed{panicOnce{Queue: d, calls: &calls}}
	})))
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the Count's panic did not reach the caller")
			}
		}()
		_, _ = s.Scaling(context.Background())
	}()
	fake.Advance(ScalingDepthInterval)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.HangGuard)
	defer cancel()
	sig, err := s.Scaling(ctx)
	if err != nil || sig.Queues[0].Depth != 7 {
		t.Fatalf("an interval after the panic: %+v %v, want the depth read again, 7", sig, err)
	}
}
