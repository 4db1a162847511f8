// Package statuspage renders the worker's status page, the human view of
// its admin endpoint: per queue the depth, the tasks, the rates and costs
// and the poison queue with a requeue button per message. The page is one
// server-rendered html/template, embedded in the binary, with inline CSS and
// no script: it reloads itself with a meta refresh. The package also issues
// the login cookie and anti-forgery tokens (Sessions) that let a browser
// use the page when the endpoint has a token. Package admin gathers the
// figures (View) and serves the routes.
package statuspage

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Refresh is how often the page reloads itself: often enough to watch a
// backlog drain, rarely enough that an open page costs little (each load
// counts every queue, one billed call each, and lists its poison queue).
const Refresh = 5 * time.Second

// PauseQuery is the page's URL query that stops it reloading itself.
const PauseQuery = "refresh=off"

// PreviewBytes bounds the preview of a poisoned message's body and
// ReasonBytes its failure reason: they are untrusted and may be large.
const (
	PreviewBytes = 160
	ReasonBytes  = 400
)

// View is everything the page shows.
type View struct {
	// Uptime of the worker, PricePer10k its configured price.
	Uptime      time.Duration
	PricePer10k float64
	// Generated is when the figures were read.
	Generated time.Time
	// LoggedIn: the browser uses a session cookie (the page offers a log
	// out); CSRF is then the anti-forgery token every form carries.
	LoggedIn bool
	CSRF     string
	// Notice is a one-line outcome of the last action (a requeue).
	Notice string
	// Paused: the page does not reload itself (PauseQuery was asked for),
	// so that a reader can read, or a click lands on the page it aimed at.
	Paused bool
	Queues []Queue
}

// Queue is one queue's row and its poison queue.
type Queue struct {
	Name string
	// Depth is visible and hidden messages; DepthError is set when it could
	// not be read.
	Depth      int
	DepthError string
	InFlight   int
	// ActiveTasks run now, IdleTasks of them sleep after an empty get,
	// TotalTasks were ever started.
	ActiveTasks, IdleTasks, TotalTasks int
	// Concurrency is the handlers the queue may run at once ("12 of
	// auto 1–64", or "64"); RateLimit its rate limit ("100/s, burst 32"),
	// empty without one.
	Concurrency, RateLimit      string
	Processed, Failed, Poisoned int64
	// BatchCalls counts a batch handler's calls (0: a handler of one
	// message); Processed and Failed count messages either way.
	BatchCalls int64
	// CallsPerMessage is billed calls per deleted message (NaN before the
	// first).
	CallsPerMessage float64
	// Figures the worker may not have: each is shown as the reason it is
	// missing when its Known flag is false.
	Rate          Figure // messages a second over the last minute
	PickupLatency Figure // time from put to a handler's start
	MonthlyCost   Figure // dollars a month at the last minute's call rate
	Poison        Poison
}

// Figure is a number the page shows formatted, or the reason it has none.
type Figure struct {
	Text    string // formatted value
	Missing string // why there is no value (shown instead, dimmed)
}

// PoisonPageSize is how many poisoned messages the page shows per queue:
// one page of the poison listing (poison.ListBodies), one backend call.
const PoisonPageSize = 20

// PoisonQuery and AfterQuery are the page's URL query for another page of
// a poison queue: ?poison=QUEUE&after=CURSOR shows the page of QUEUE's
// poison queue after CURSOR (the others show their first).
const (
	PoisonQuery = "poison"
	AfterQuery  = "after"
)

// Poison is a queue's poison queue as the page shows it.
type Poison struct {
	// Name of the poison queue.
	Name string
	// Error is set when the poison queue could not be read.
	Error string
	// Messages are one page of the poisoned messages, oldest first. After
	// is the cursor the page starts after ("" for the first page), Next
	// the cursor of the next page ("" on the last). Truncated is set when
	// the backend shows only its first messages to a peek (Azure, Redis):
	// there may be more than the pages show.
	Messages  []PoisonMessage
	After     string
	Next      string
	Truncated bool
}

// PoisonMessage is one poisoned message.
type PoisonMessage struct {
	// PoisonID is its id in the poison queue (what requeue takes); ID the
	// original's id in its queue ("" when the poison message carries no
	// envelope).
	PoisonID, ID string
	DequeueCount int
	// Rule is why it was poisoned, Reason the last failure's error.
	Rule, Reason string
	FailedAt     time.Time
	// Body is the original body (the page shows a bounded preview) and
	// Size its whole length.
	Body []byte
	Size int
}

//go:embed status.html
var pageHTML string

//go:embed login.html
var loginHTML string

var funcs = template.FuncMap{
	"pathEscape": url.PathEscape,
	"dur":        FormatDuration,
	"money":      FormatMoney,
	"ratio": func(v float64) string {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return "—"
		}
		return fmt.Sprintf("%.2f", v)
	},
	"preview": func(b []byte) string { return Preview(b, PreviewBytes) },
	"reason":  func(s string) string { return Preview([]byte(s), ReasonBytes) },
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return FormatDuration(now.Sub(t)) + " ago"
	},
	"secs":  func(d time.Duration) int { return int(d / time.Second) },
	"bytes": FormatBytes,
}

var (
	pageTmpl  = template.Must(template.New("status").Funcs(funcs).Parse(pageHTML))
	loginTmpl = template.Must(template.New("login").Parse(loginHTML))
)

// Render writes the page for v.
func Render(w io.Writer, v View) error {
	var b bytes.Buffer // a template error must not leave half a page
	if err := pageTmpl.Execute(&b, struct {
		View
		Refresh time.Duration
	}{v, Refresh}); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

// RenderLogin writes the login form; failed says the last token was wrong.
func RenderLogin(w io.Writer, action string, failed bool) error {
	return loginTmpl.Execute(w, struct {
		Action string
		Failed bool
		TTL    string
	}{action, failed, FormatDuration(SessionTTL)})
}

// Preview returns at most max bytes of b as printable text: invalid UTF-8
// control and other unprintable characters become
// U+FFFD, white space a space,, and a cut is marked with "…". The
// page escapes it again; this keeps it short and readable.
func Preview(b []byte, max int) string {
	var s strings.Builder
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case unicode.IsSpace(r):
			r = ' '
		case r == utf8.RuneError || unicode.IsControl(r) || !unicode.IsPrint(r):
			r = utf8.RuneError
		}
		if s.Len()+utf8.RuneLen(r) > max {
			s.WriteString("…")
			break
		}
		s.WriteRune(r)
		i += n
	}
	return s.String()
}

// FormatDuration shows d rounded to what a reader needs: "850ms",
// "12.3s", "4m05s", "3h20m".
func FormatDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "—"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
}

// FormatRate shows messages a second as a reader takes them in: "12.3/s",
// or "4.0/min" below one a second, "0/s" for none.
func FormatRate(perSecond float64) string {
	switch {
	case math.IsNaN(perSecond) || perSecond < 0:
		return "—"
	case perSecond == 0:
		return "0/s"
	case perSecond < 1:
		return fmt.Sprintf("%.1f/min", perSecond*60)
	default:
		return fmt.Sprintf("%.1f/s", perSecond)
	}
}

// FormatBytes shows a size: "512 B", "12.0 KiB", "3.4 MiB".
func FormatBytes(n int) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
}

// FormatMoney shows dollars with the precision small sums need: "$0.0042",
// "$2.38", "$457.20".
func FormatMoney(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	if v != 0 && math.Abs(v) < 1 {
		return fmt.Sprintf("$%.4f", v)
	}
	return fmt.Sprintf("$%.2f", v)
}
