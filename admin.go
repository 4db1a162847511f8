package adaptq

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue/meter"
)

// Admin endpoint paths.
const (
	StatsPath  = "/v1/stats"
	HealthPath = "/healthz"
	// TriggerPath is POSTed to pull a queue's push trigger; {name} is the
	// queue's name.
	TriggerPath = "/v1/queues/{name}/trigger"
)

// adminShutdownTimeout bounds the admin endpoint's shutdown after the
// listeners have drained.
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

	Processed         int64 `json:"processed"`
	Failed            int64 `json:"failed"`
	Deleted           int64 `json:"deleted"`
	ReceiptMismatches int64 `json:"receipt_mismatches"`
	GetErrors         int64 `json:"get_errors"`
	Renewed           int64 `json:"renewed"`
	Released          int64 `json:"released"`

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

func callFigures(m meter.Snapshot) CallFigures {
	f := CallFigures{Calls: m.Map(), TotalCalls: m.Total(), CallErrors: m.TotalErrors(), Cost: m.Cost()}
	if c := m.CallsPerMessage(); !math.IsNaN(c) {
		f.CallsPerMessage = c
	}
	return f
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

// Stats reads every queue's state, depth (one billed Count each), meter
// and windows.
func (w *Worker) Stats(ctx context.Context) Stats {
	w.mu.Lock()
	qs := append([]*workerQueue(nil), w.queues...)
	up := w.clock.Now().Sub(w.started)
	w.mu.Unlock()
	s := Stats{Uptime: Duration(up), PricePer10k: w.cfg.PricePer10k}
	for _, wq := range qs {
		st, err := wq.l.State(ctx)
		minute, hour := wq.win.windows(w.clock.Now())
		qs := queueStats(wq.name, st, wq.meter.Snapshot(), QueueWindows{Name: wq.name, LastMinute: minute, LastHour: hour})
		if err != nil {
			qs.DepthError = err.Error()
		}
		s.Queues = append(s.Queues, qs)
	}
	return s
}

func queueStats(name string, st listener.State, m meter.Snapshot, win QueueWindows) QueueStats {
	q := QueueStats{
		Name: name, Depth: st.Depth, PricePer10k: m.PricePer10k,
		ActiveTasks: st.ActiveTasks, TotalTasks: st.TotalTasks, IdleTasks: st.IdleTasks, InFlight: st.InFlight,
		HandlerTime: Duration(st.HandlerTime),
		Processed:   st.Processed, Failed: st.Failed, Deleted: st.Deleted, ReceiptMismatches: st.ReceiptMismatches,
		GetErrors: st.GetErrors, Renewed: st.Renewed, Released: st.Released,
		CallFigures: callFigures(m),
		LastMinute:  win.LastMinute, LastHour: win.LastHour,
	}
	cur := win.Current()
	q.MonthlyCost, q.IdleCallsPerHour = cur.MonthlyCost, cur.EmptyGetsPerHour
	return q
}

// AdminAddress is the address the admin endpoint listens on while the
// worker runs ("" if it has none or has not started).
func (w *Worker) AdminAddress() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.admin
}

type adminServer struct {
	srv  *http.Server
	done chan struct{}
	log  *zap.Logger
}

// startAdmin serves the admin endpoint if an address is configured.
func (w *Worker) startAdmin() (*adminServer, error) {
	addr := w.cfg.Admin.Address
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin.address: %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+HealthPath, func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "text/plain")
		_, _ = rw.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET "+ReadyPath, func(rw http.ResponseWriter, _ *http.Request) {
		ready, lines := w.Readiness()
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		rw.Header().Set("Cache-Control", "no-store")
		if !ready {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = io.WriteString(rw, strings.Join(lines, "\n")+"\n")
	})
	mux.Handle("GET "+MetricsPath, w.metrics.handler())
	mux.HandleFunc("GET "+StatsPath, func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(rw)
		enc.SetIndent("", "  ")
		_ = enc.Encode(w.Stats(r.Context()))
	})
	mux.HandleFunc("GET "+ScalingPath, w.serveScaling)
	mux.HandleFunc("POST "+TriggerPath, func(rw http.ResponseWriter, r *http.Request) {
		if err := w.Trigger(r.PathValue("name")); err != nil {
			http.Error(rw, err.Error(), http.StatusNotFound)
			return
		}
		rw.WriteHeader(http.StatusAccepted)
	})
	w.poisonRoutes(mux)
	w.serveStatusPage(mux, ln.Addr().String())
	// Outermost first: the body limit, the Host check (DNS rebinding), the
	// cross-origin check (a web page posting to loopback), the token.
	h := limitBody(w.checkHost(ln.Addr().String(), http.NewCrossOriginProtection().Handler(w.authorize(mux))))
	a := &adminServer{
		srv:  newAdminHTTPServer(h),
		done: make(chan struct{}),
		log:  w.log,
	}
	w.mu.Lock()
	w.admin = ln.Addr().String()
	w.mu.Unlock()
	go func() {
		defer close(a.done)
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("adaptq: admin endpoint failed", zap.Error(err))
		}
	}()
	w.log.Info("adaptq: admin endpoint", zap.String("address", ln.Addr().String()))
	return a, nil
}

func (a *adminServer) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), adminShutdownTimeout)
	defer cancel()
	_ = a.srv.Shutdown(ctx)
	<-a.done
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

// limitBody refuses a request body over adminMaxBody.
func limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.ContentLength > adminMaxBody {
			http.Error(rw, "request body too large", http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(rw, r.Body, adminMaxBody)
		next.ServeHTTP(rw, r)
	})
}

// checkHost refuses, when no token is configured, a request whose Host is
// neither the listening address nor a loopback name: a web page that
// rebinds its own name to 127.0.0.1 then cannot read or drive the
// endpoint. With a token the token decides. The probes (health and
// readiness) stay open: a kubelet names the pod's address.
func (w *Worker) checkHost(listen string, next http.Handler) http.Handler {
	if w.cfg.Admin.Token != "" {
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
func (w *Worker) authorize(next http.Handler) http.Handler {
	token := w.cfg.Admin.Token
	if token == "" {
		return next
	}
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !probePath(r.URL.Path) && (!ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1) {
			if w.sessionAuthorize(rw, r, next) {
				return
			}
			http.Error(rw, "unauthorized: send Authorization: Bearer <admin.token>", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(rw, r)
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
