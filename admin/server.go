package admin

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/internal/statuspage"
	"github.com/adaptq/adaptq/queue"
)

// Worker is what the admin endpoint reads and drives: the worker host
// (*adaptq.Worker implements it). Its methods are safe for concurrent use
// and answer while the worker is not running too (with ErrNotRunning where
// they return an error).
type Worker interface {
	// Stats reads every queue's state, depth, meter and windows: GET
	// StatsPath and the status page.
	Stats(ctx context.Context) Stats
	// Scaling is the scaling signal, GET ScalingPath; an error (a depth
	// that could not be read, ErrNotRunning) makes the answer a 503.
	Scaling(ctx context.Context) (Scaling, error)
	// Readiness says whether the worker is ready and, per queue, why or
	// why not: GET ReadyPath.
	Readiness() (ready bool, lines []string)
	// Trigger pulls the named queue's push trigger: POST TriggerPath.
	Trigger(queueName string) error
	// Metrics is the worker's Prometheus registry: GET MetricsPath.
	Metrics() prometheus.Gatherer
	// The poison tools: the poison routes and the status page's requeue.
	PoisonWorker
}

// ErrNotRunning: the worker does not run (yet, or any more); a poison route
// answers 503. The worker's errors wrap it (adaptq.ErrNotRunning is this
// value).
var ErrNotRunning = errors.New("adaptq: worker is not running")

// The admin endpoint's paths besides the poison tools' and the status
// page's: the probes, the metrics, the stats, the scaling signal and the
// push trigger.
const (
	// StatsPath serves Stats as JSON, GET only.
	StatsPath = "/v1/stats"
	// HealthPath answers 200 while the process is alive: the liveness probe.
	HealthPath = "/healthz"
	// ReadyPath answers 200 when the worker is ready (every queue opened and
	// answering its gets) and 503 with a reason per queue otherwise: the
	// Kubernetes readiness probe (see Worker.Readiness).
	ReadyPath = "/readyz"
	// MetricsPath serves the worker's metrics in the Prometheus text format.
	MetricsPath = "/metrics"
	// ScalingPath serves the scaling signal, GET only: how many worker
	// instances the queues need, for an autoscaler such as KEDA.
	ScalingPath = "/v1/scaling"
	// TriggerPath is POSTed to pull a queue's push trigger; {name} is the
	// queue's name.
	TriggerPath = "/v1/queues/{name}/trigger"
)

// adminShutdownTimeout bounds the admin endpoint's shutdown (Server.Stop,
// after the worker's listeners have drained).
const adminShutdownTimeout = 5 * time.Second

// The admin server's bounds, so that a slow or hostile client cannot hold
// its connections or memory: a request is read within adminReadTimeout
// (its headers within adminReadHeaderTimeout), answered within
// adminWriteTimeout (a stats call counts every queue, one billed call
// each), an idle keep-alive connection is closed after adminIdleTimeout,
// and no route takes a body larger than adminMaxBody (none needs one).
const (
	adminReadHeaderTimeout = 5 * time.Second
	adminReadTimeout       = 10 * time.Second
	adminWriteTimeout      = 30 * time.Second
	adminIdleTimeout       = 60 * time.Second
	adminMaxHeaderBytes    = 16 << 10
	adminMaxBody           = 4 << 10
)

// Stats is the worker's state and costs, as GET /v1/stats serves them.
type Stats struct {
	Uptime      Duration     `json:"uptime"`
	PricePer10k float64      `json:"price_per_10k"`
	Queues      []QueueStats `json:"queues"`
}

// QueueStats is one queue's state, its listener's counters and its meter.
type QueueStats struct {
	Name  string `json:"name"`
	Depth int    `json:"depth"`
	// PricePer10k is what 10,000 calls to this queue cost: 0 where calls
	// are free, price_per_10k (or the backend's list price) where billed.
	PricePer10k float64 `json:"price_per_10k"`
	// DepthError is set when the depth could not be read.
	DepthError string `json:"depth_error,omitempty"`

	ActiveTasks int      `json:"active_tasks"`
	TotalTasks  int      `json:"total_tasks"`
	IdleTasks   int      `json:"idle_tasks"`
	InFlight    int      `json:"in_flight"`
	HandlerTime Duration `json:"handler_time"`
	// Flow is the queue's concurrency limit and rate limit (see Flow).
	Flow Flow `json:"flow"`

	Processed         int64 `json:"processed"`
	Failed            int64 `json:"failed"`
	Poisoned          int64 `json:"poisoned"`
	Deleted           int64 `json:"deleted"`
	ReceiptMismatches int64 `json:"receipt_mismatches"`
	GetErrors         int64 `json:"get_errors"`
	Renewed           int64 `json:"renewed"`
	Released          int64 `json:"released"`
	// BatchCalls counts a batch handler's calls (0 for a handler of one
	// message); Processed and Failed count its messages.
	BatchCalls int64 `json:"batch_calls,omitempty"`

	// The backend calls since start.
	CallFigures

	// LastMinute and LastHour are the queue's activity over those windows
	// (see Window): what it costs now, not since start.
	LastMinute Window `json:"last_minute"`
	LastHour   Window `json:"last_hour"`
	// MonthlyCost is the cost of a 30-day month at the current rate, and
	// IdleCallsPerHour the empty gets an hour at it (what the queue costs
	// while there is nothing to do): from the last hour once the worker
	// has run an hour, from the last minute before; null during the first
	// minute, which is too short to extrapolate from.
	MonthlyCost      *float64 `json:"monthly_cost"`
	IdleCallsPerHour *float64 `json:"idle_calls_per_hour"`
}

// CallFigures are billed backend calls, as the cost meter counts them:
// by kind, in all, failed, and their price; CallsPerMessage is calls per
// message deleted (0 before the first).
type CallFigures struct {
	Calls           map[string]int64 `json:"calls"`
	TotalCalls      int64            `json:"total_calls"`
	CallErrors      int64            `json:"call_errors"`
	Cost            float64          `json:"cost"`
	CallsPerMessage float64          `json:"calls_per_message"`
}

// Duration is a time.Duration that reads and writes as a Go duration
// string in JSON.
type Duration time.Duration

// MarshalJSON writes "1m30s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads "1m30s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// Options configure an admin endpoint.
type Options struct {
	// Address is the host:port to listen on (port 0: any free port; see
	// Server.Addr).
	Address string
	// Token, if set, must be sent as "Authorization: Bearer TOKEN" (or a
	// browser logs in to the status page with it); the probes stay open.
	// Without a token, a request must name the endpoint by its address or
	// a loopback name.
	Token string
	// Logger receives the endpoint's errors and warnings (default: none).
	Logger *zap.Logger
	// Clock stamps the status page and its sessions, and refills the
	// failed-login throttle (default: the real clock).
	Clock clock.Clock

	// MaxConns bounds the connections the endpoint holds open (0:
	// DefaultMaxConns); see connLimit for what happens at the bound.
	MaxConns int
	// ReadHeaderTimeout closes a connection that has not sent a request's
	// headers within it, and IdleTimeout one idle that long between
	// requests (0: 5 s and 60 s). Tests make them short.
	ReadHeaderTimeout, IdleTimeout time.Duration
}

// Server is a running admin endpoint: Start it, Stop it.
type Server struct {
	w     Worker
	token string
	log   *zap.Logger
	clock clock.Clock
	addr  string
	// sessions are the status page's logins, when the endpoint has a token
	// (set before it serves).
	sessions *statuspage.Sessions
	// throttle limits and logs wrong tokens per client address.
	throttle *authThrottle

	srv  *http.Server
	done chan struct{}
}

// Start listens on o.Address and serves w's admin endpoint until Stop. An
// address that is not loopback needs o.Token: anyone who reaches the
// endpoint could otherwise read and drive the worker.
func Start(w Worker, o Options) (*Server, error) {
	s, ln, err := listen(o)
	if err != nil {
		return nil, err
	}
	s.w = w
	mux := http.NewServeMux()
	s.probeRoutes(mux, w)
	mux.Handle("GET "+MetricsPath, promhttp.HandlerFor(w.Metrics(), promhttp.HandlerOpts{}))
	mux.HandleFunc("GET "+StatsPath, func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(rw)
		enc.SetIndent("", "  ")
		st := s.w.Stats(r.Context())
		for i := range st.Queues {
			st.Queues[i].DepthError = queue.RedactText(st.Queues[i].DepthError)
		}
		_ = enc.Encode(st)
	})
	mux.Handle("GET "+ScalingPath, serveScaling(w))
	mux.HandleFunc("POST "+TriggerPath, func(rw http.ResponseWriter, r *http.Request) {
		if err := s.w.Trigger(r.PathValue("name")); err != nil {
			http.Error(rw, err.Error(), http.StatusNotFound)
			return
		}
		rw.WriteHeader(http.StatusAccepted)
	})
	s.poisonRoutes(mux)
	s.serveStatusPage(mux, ln.Addr().String())
	s.serve(mux, ln, o)
	return s, nil
}

// listen checks o and listens on o.Address: the part of starting an
// endpoint that Start and StartScaler share.
func listen(o Options) (*Server, net.Listener, error) {
	addr := o.Address
	if host, _, err := net.SplitHostPort(addr); err == nil && o.Token == "" && !loopbackHost(host) {
		return nil, nil, fmt.Errorf("admin.address: %q is not a loopback address; set a token so that only holders of it can trigger and read the worker", addr)
	}
	if o.Token != "" {
		if err := CheckToken(o.Token); err != nil {
			return nil, nil, err
		}
	}
	if o.MaxConns < 0 {
		return nil, nil, fmt.Errorf("admin.max_connections: %d is negative", o.MaxConns)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("admin.address: %q: %w", addr, err)
	}
	s := &Server{token: o.Token, log: o.Logger, clock: o.Clock, addr: ln.Addr().String(), done: make(chan struct{})}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if s.clock == nil {
		s.clock = clock.Real
	}
	s.throttle = newAuthThrottle(s.clock, s.log)
	return s, ln, nil
}

// probeRoutes adds the probes, open without the token: alive, and ready
// as r says.
func (s *Server) probeRoutes(mux *http.ServeMux, r interface{ Readiness() (bool, []string) }) {
	mux.HandleFunc("GET "+HealthPath, func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "text/plain")
		_, _ = rw.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET "+ReadyPath, func(rw http.ResponseWriter, _ *http.Request) {
		ready, lines := r.Readiness()
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		rw.Header().Set("Cache-Control", "no-store")
		if !ready {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = io.WriteString(rw, strings.Join(lines, "\n")+"\n")
	})
}

// serve serves mux on ln behind every guard of the endpoint, until Stop.
func (s *Server) serve(mux *http.ServeMux, ln net.Listener, o Options) {
	// Outermost first: the body limit, the cross-site refusal (a web page's
	// request of any method), the Host check (DNS rebinding), the
	// cross-origin check (a web page posting to loopback), the token.
	h := limitBody(refuseCrossSite(s.checkHost(ln.Addr().String(), http.NewCrossOriginProtection().Handler(s.authorize(mux)))))
	s.srv = newAdminHTTPServer(h)
	if o.ReadHeaderTimeout > 0 {
		s.srv.ReadHeaderTimeout = o.ReadHeaderTimeout
	}
	if o.IdleTimeout > 0 {
		s.srv.IdleTimeout = o.IdleTimeout
	}
	limited := newConnLimit(ln, cmp.Or(o.MaxConns, DefaultMaxConns))
	s.srv.ConnState = limited.connState
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(limited); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("adaptq: admin endpoint failed", zap.Error(err))
		}
	}()
	s.log.Info("adaptq: admin endpoint", zap.String("address", ln.Addr().String()))
}

// Addr is the address the endpoint listens on (the port chosen, if
// Options.Address asked for port 0).
func (s *Server) Addr() string { return s.addr }

// Stop closes the endpoint: it stops listening, lets requests in flight
// finish within adminShutdownTimeout, and returns when the server has
// ended.
func (s *Server) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), adminShutdownTimeout)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	<-s.done
	s.throttle.stop()
}

// newAdminHTTPServer is the admin endpoint's server, with every timeout
// set.
func newAdminHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: adminReadHeaderTimeout,
		ReadTimeout:       adminReadTimeout,
		WriteTimeout:      adminWriteTimeout,
		IdleTimeout:       adminIdleTimeout,
		MaxHeaderBytes:    adminMaxHeaderBytes,
	}
}

// limitBody refuses a request body over adminMaxBody, and closes the
// connection after a request that has a body.
func limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.ContentLength > adminMaxBody {
			http.Error(rw, "request body too large", http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(rw, r.Body, adminMaxBody)
		if r.ContentLength != 0 {
			// A body the route does not read: net/http would read it
			// before answering and after, until ReadTimeout, so a client
			// trickling it would hold a connection slot that long. The
			// connection closes after the answer instead, and the read
			// after the handler ends at once.
			rw.Header().Set("Connection", "close")
			defer func() { _ = http.NewResponseController(rw).SetReadDeadline(time.Unix(1, 0)) }()
		}
		next.ServeHTTP(rw, r)
	})
}

// checkHost refuses, when no token is configured, a request whose Host is
// neither the listening address nor a loopback name: a web page that
// rebinds its own name to 127.0.0.1 then cannot read or drive the
// endpoint. With a token the token decides. The probes (health and
// readiness) stay open: a kubelet names the pod's address.
func (s *Server) checkHost(listen string, next http.Handler) http.Handler {
	if s.token != "" {
		return next
	}
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if !probePath(r.URL.Path) && !localHost(r.Host, listen) {
			http.Error(rw, "forbidden: Host is not this endpoint's address (set admin.token to serve other names)", http.StatusForbidden)
			return
		}
		next.ServeHTTP(rw, r)
	})
}

// loopbackHost reports whether host, an address's host part, is loopback.
func loopbackHost(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// localHost reports whether a request's Host names the endpoint listening
// on listen: the listening address itself, or a loopback name or address.
func localHost(host, listen string) bool {
	if strings.EqualFold(host, listen) {
		return true
	}
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(name, "["), "]"), ".")
	if strings.EqualFold(name, "localhost") {
		return true
	}
	if ip := net.ParseIP(name); ip != nil && ip.IsLoopback() {
		return true
	}
	if lh, _, err := net.SplitHostPort(listen); err == nil {
		if ip := net.ParseIP(lh); ip != nil && !ip.IsUnspecified() && ip.Equal(net.ParseIP(name)) {
			return true
		}
	}
	return false
}

// authorize requires the configured token, if any, as a bearer token, or a
// browser's status page session (sessionAuthorize). The probes (health and
// readiness) stay open; /metrics needs the token (Prometheus sends it with
// bearer_token / authorization in its scrape config).
func (s *Server) authorize(next http.Handler) http.Handler {
	token := s.token
	if token == "" {
		return next
	}
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if probePath(r.URL.Path) {
			next.ServeHTTP(rw, r)
			return
		}
		// A request that presents a credential spends an attempt of its
		// client's throttle (authThrottle), given back if it is right.
		if _, presented := r.Header["Authorization"]; presented {
			if !s.throttle.take(rw, r) {
				return
			}
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1 {
				s.throttle.refund(r)
				next.ServeHTTP(rw, r)
				return
			}
			s.throttle.failed(r)
		}
		if s.sessionAuthorize(rw, r, next) {
			return
		}
		http.Error(rw, "unauthorized: send Authorization: Bearer <admin.token>", http.StatusUnauthorized)
	})
}

// probePath reports whether path is a probe's, open without the token and
// from any Host: a probe reads only whether the worker is alive or ready
// (and, for readiness, each queue's state, with no URL or secret).
func probePath(path string) bool { return path == HealthPath || path == ReadyPath }

// TriggerTimeout bounds a producer's trigger request: a trigger is a hint,
// and a producer must not wait on a worker that is busy or gone.
const TriggerTimeout = 2 * time.Second

// SendTrigger pulls the push trigger of queueName on the worker whose admin
// endpoint is at address (host:port), with token if it needs one. A
// producer in another process calls it after it puts. A lost trigger
// delays the work by at most the queue's safety interval; it never loses
// it.
func SendTrigger(ctx context.Context, address, token, queueName string) error {
	ctx, cancel := context.WithTimeout(ctx, TriggerTimeout)
	defer cancel()
	u := "http://" + DialAddress(address) + strings.Replace(TriggerPath, "{name}", url.PathEscape(queueName), 1)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return fmt.Errorf("adaptq: trigger %q: %w", queueName, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("adaptq: trigger %q at %s: %w", queueName, address, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("adaptq: trigger %q at %s: %s", queueName, address, resp.Status)
	}
	return nil
}

// DialAddress turns a listen address into one a client on the same machine
// can dial: a wildcard or empty host (":8089", "0.0.0.0:8089", "[::]:8089")
// becomes loopback.
func DialAddress(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}
