package admin

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/internal/statuspage"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
)

// The status page's paths on the admin endpoint: the page itself, the
// login and logout of a browser when the endpoint has a token, and the
// form the page's requeue buttons post to ({name} is the queue's name; the
// form's id field names one poisoned message, all=1 every one).
const (
	StatusPath        = "/"
	LoginPath         = "/login"
	LogoutPath        = "/logout"
	StatusRequeuePath = "/status/queues/{name}/requeue"
)

// serveStatusPage adds the status page's routes to mux. With a token, a
// browser logs in once (POST LoginPath with the token) and then holds a
// cookie that authorize accepts in place of the bearer token; see
// sessionAuthorize.
func (s *Server) serveStatusPage(mux *http.ServeMux, listen string) {
	if s.token != "" {
		_, port, _ := net.SplitHostPort(listen)
		s.sessions = statuspage.NewSessions(s.token, port, s.clock.Now)
	}
	mux.HandleFunc("GET "+StatusPath+"{$}", s.statusPage)
	mux.HandleFunc("POST "+LoginPath, s.login)
	mux.HandleFunc("POST "+LogoutPath, s.logout)
	mux.HandleFunc("POST "+StatusRequeuePath, s.statusRequeue)
}

// statusPage renders the page.
func (s *Server) statusPage(rw http.ResponseWriter, r *http.Request) {
	v := s.statusView(r.Context(), r.URL.Query().Get(statuspage.PoisonQuery), r.URL.Query().Get(statuspage.AfterQuery))
	v.Paused = r.URL.Query().Get("refresh") == "off" // statuspage.PauseQuery
	v.Notice = requeueNotice(r.URL.Query(), v.Queues)
	if ss := s.sessions; ss != nil {
		if sess := ss.Session(r); sess != "" {
			v.LoggedIn, v.CSRF = true, ss.CSRF(sess)
		}
	}
	htmlHeaders(rw)
	if err := statuspage.Render(rw, v); err != nil {
		s.log.Error("adaptq: rendering the status page failed", zap.Error(err))
		http.Error(rw, "the status page failed to render", http.StatusInternalServerError)
	}
}

// htmlHeaders sets the headers of the status page and the login form: not
// cached, no script, no outside resource, no framing (a document, nothing
// more).
func htmlHeaders(rw http.ResponseWriter) {
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	rw.Header().Set("Cache-Control", "no-store")
	rw.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	rw.Header().Set("X-Content-Type-Options", "nosniff")
}

// statusView gathers the page's figures; the poison queue of the queue
// named pageOf shows its page after the cursor after, the others their
// first.
func (s *Server) statusView(ctx context.Context, pageOf, after string) statuspage.View {
	st := s.w.Stats(ctx)
	v := statuspage.View{Uptime: time.Duration(st.Uptime), PricePer10k: st.PricePer10k, Generated: s.clock.Now()}
	for _, q := range st.Queues {
		cpm := q.CallsPerMessage
		if q.Deleted == 0 {
			cpm = math.NaN() // not 0: no message has been through yet
		}
		v.Queues = append(v.Queues, statuspage.Queue{
			Name: q.Name, Depth: q.Depth, DepthError: redactLine(q.DepthError), InFlight: q.InFlight,
			ActiveTasks: q.ActiveTasks, IdleTasks: q.IdleTasks, TotalTasks: q.TotalTasks,
			Processed: q.Processed, Failed: q.Failed, Poisoned: q.Poisoned,
			BatchCalls:      q.BatchCalls,
			CallsPerMessage: cpm,
			Concurrency:     q.Flow.concurrencyText(),
			RateLimit:       q.Flow.rateText(),
			Rate:            statuspage.Figure{Text: statuspage.FormatRate(q.LastMinute.Rate)},
			PickupLatency:   pickupFigure(q.LastMinute),
			MonthlyCost:     statuspage.Figure{Missing: "the worker has run less than a minute: too short to scale to a month"},
			Poison:          s.poisonView(ctx, q.Name, pageOf, after),
		})
		if c := q.MonthlyCost; c != nil {
			v.Queues[len(v.Queues)-1].MonthlyCost = statuspage.Figure{Text: statuspage.FormatMoney(*c)}
		}
	}
	return v
}

// login checks the token a browser's login form sent and, if it is right,
// gives the browser its session cookie.
func (s *Server) login(rw http.ResponseWriter, r *http.Request) {
	ss := s.sessions
	if ss == nil {
		http.Error(rw, "this endpoint has no token: nothing to log in to", http.StatusNotFound)
		return
	}
	if !s.throttle.take(rw, r) {
		return
	}
	if !ss.CheckToken(r.PostFormValue("token")) {
		s.throttle.failed(r)
		htmlHeaders(rw)
		rw.WriteHeader(http.StatusUnauthorized)
		_ = statuspage.RenderLogin(rw, LoginPath, true)
		return
	}
	s.throttle.refund(r)
	http.SetCookie(rw, ss.Login())
	http.Redirect(rw, r, StatusPath, http.StatusSeeOther)
}

// logout ends the browser's session, on the server: a copy of its cookie
// is refused from then on.
func (s *Server) logout(rw http.ResponseWriter, r *http.Request) {
	if ss := s.sessions; ss != nil {
		http.SetCookie(rw, ss.Logout(r))
	}
	http.Redirect(rw, r, StatusPath, http.StatusSeeOther)
}

// sessionAuthorize lets a browser without the bearer token through when it
// can: to the login form's POST, and anywhere with a valid session cookie
// (a state-changing request then also needs the session's anti-forgery
// token). A browser with neither that asks for the page gets the login
// form. It reports whether it answered the request; if not, authorize
// refuses it.
func (s *Server) sessionAuthorize(rw http.ResponseWriter, r *http.Request, next http.Handler) bool {
	ss := s.sessions
	if ss == nil {
		return false
	}
	if r.URL.Path == LoginPath && r.Method == http.MethodPost {
		next.ServeHTTP(rw, r)
		return true
	}
	if sess := ss.Session(r); sess != "" {
		if !safeMethod(r.Method) && !ss.CheckCSRF(r, sess) {
			http.Error(rw, "forbidden: the form's anti-forgery token is missing or wrong (reload the page)", http.StatusForbidden)
			return true
		}
		next.ServeHTTP(rw, r)
		return true
	}
	if r.URL.Path == StatusPath && safeMethod(r.Method) {
		htmlHeaders(rw)
		rw.WriteHeader(http.StatusUnauthorized)
		_ = statuspage.RenderLogin(rw, LoginPath, false)
		return true
	}
	return false
}

// safeMethod: a request that changes nothing.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// pickupFigure is the mean pickup latency of the messages first got in w,
// or why there is none.
func pickupFigure(w Window) statuspage.Figure {
	if w.PickedUp == 0 {
		return statuspage.Figure{Missing: "no message was picked up in the last minute"}
	}
	return statuspage.Figure{Text: statuspage.FormatDuration(time.Duration(w.PickupLatency))}
}

// poisonView reads one page of the named queue's poison queue
// (poison.ListBodies: it only peeks, one backend call for the page, and
// hides nothing, so the page can reload itself): the page after the cursor
// after if pageOf names the queue, else the first.
func (s *Server) poisonView(ctx context.Context, name, pageOf, after string) statuspage.Poison {
	pq, err := s.w.PoisonQueue(name)
	if err != nil {
		return statuspage.Poison{Name: "?", Error: err.Error()}
	}
	p := statuspage.Poison{Name: pq.Name()}
	if pq.Features().MaxPeek == 0 {
		p.Error = "this backend cannot show messages without taking them; list them with adaptq poison list --scan"
		return p
	}
	if pageOf != name {
		after = ""
	}
	page, err := poison.ListBodies(ctx, pq, after, statuspage.PoisonPageSize)
	if err != nil {
		p.Error = redactLine(err.Error())
		return p
	}
	p.After, p.Next, p.Truncated = after, page.Next, page.Truncated
	for _, m := range page.Messages {
		failed := m.FailedAt
		if failed.IsZero() {
			failed = m.PoisonedAt
		}
		p.Messages = append(p.Messages, statuspage.PoisonMessage{
			PoisonID: m.PoisonID, ID: m.ID, DequeueCount: m.DequeueCount,
			Rule: string(m.Rule), Reason: redactLine(m.Reason), FailedAt: failed,
			Body: m.Body, Size: m.Size,
		})
	}
	return p
}

// statusRequeue is the page's requeue button (form field id, a poison id)
// and its requeue all (all=1): Worker.PoisonRequeue, then back to the page
// with what it did.
func (s *Server) statusRequeue(rw http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var sel poison.Selection
	if r.PostFormValue("all") == "1" {
		sel.All = true
	} else {
		sel.IDs = r.PostForm["id"]
	}
	res, err := s.w.PoisonRequeue(r.Context(), name, sel)
	if err != nil && len(res.Done) == 0 {
		writePoison(rw, nil, err)
		return
	}
	for _, f := range res.Failed {
		s.log.Warn("adaptq: requeue from the status page failed", zap.String("queue", name),
			zap.String("poison_id", f.PoisonID), zap.String("msg_id", f.ID), zap.String("error", redactLine(f.Error)))
	}
	q := url.Values{"queue": {name}, "requeued": {strconv.Itoa(len(res.Done))}}
	if len(res.NotFound) > 0 {
		q.Set("not_found", strconv.Itoa(len(res.NotFound)))
	}
	if len(res.Failed) > 0 || err != nil {
		q.Set("failed", strconv.Itoa(max(len(res.Failed), 1)))
	}
	if res.More {
		q.Set("more", "1")
	}
	http.Redirect(rw, r, StatusPath+"?"+statuspage.PauseQuery+"&"+q.Encode(), http.StatusSeeOther)
}

// requeueNotice is the page's line about the requeue it was redirected
// from, if any. It shows only numbers and the name of a queue the worker
// runs, so a link cannot make the page say something else.
func requeueNotice(q url.Values, queues []statuspage.Queue) string {
	name := q.Get("queue")
	if name == "" || !slices.ContainsFunc(queues, func(s statuspage.Queue) bool { return s.Name == name }) {
		return ""
	}
	count := func(k string) int {
		n, err := strconv.Atoi(q.Get(k))
		if err != nil || n < 0 {
			return 0
		}
		return n
	}
	if !q.Has("requeued") {
		return ""
	}
	requeued := count("requeued")
	msg := fmt.Sprintf("Requeued %d message%s of %s.", requeued, plural(requeued), name)
	if n := count("not_found"); n > 0 {
		msg += fmt.Sprintf(" %d %s not in the poison queue (already requeued or purged).", n, was(n))
	}
	if n := count("failed"); n > 0 {
		msg += fmt.Sprintf(" %d failed and stayed in the poison queue: see the worker's log.", n)
	}
	if q.Get("more") == "1" {
		msg += " More remain: requeue all again."
	}
	return msg
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func was(n int) string {
	if n == 1 {
		return "was"
	}
	return "were"
}

// redactLine hides the secrets in s (queue.RedactText) and keeps it to one
// line, for a cell of the page or a log field.
func redactLine(s string) string {
	return strings.Join(strings.Fields(queue.RedactText(s)), " ")
}
