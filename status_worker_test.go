package adaptq

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
)

// The status page on a real worker: its figures and its requeue button.
// The page's HTTP behaviour (sessions, origins, the login) is package
// admin's test.

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// postCase is a POST to a page route and the status it must get.
type postCase struct {
	name    string
	form    url.Values
	cookie  *http.Cookie
	headers []string
	want    int
}

// cell returns the text of the cell of class class in the page's row of
// queue name (markup stripped).
func cell(t *testing.T, page, name, class string) string {
	t.Helper()
	row := regexp.MustCompile(`(?s)<tr data-queue="` + regexp.QuoteMeta(name) + `">(.*?)</tr>`).FindStringSubmatch(page)
	if row == nil {
		t.Fatalf("no row for %s in the page:\n%s", name, page)
	}
	c := regexp.MustCompile(`(?s)<td class="n ` + class + `">(.*?)</td>`).FindStringSubmatch(row[1])
	if c == nil {
		t.Fatalf("no %s cell in the row of %s:\n%s", class, name, row[1])
	}
	return strings.TrimSpace(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(c[1], ""))
}

// The page's windowed figures, in virtual time: after a drain the rate and
// the pickup latency show, the monthly cost not while the worker has run
// less than a minute (nothing is extrapolated from seconds); later it does.
func TestStatusPageFigures(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("page-figures")
	const messages = 20
	cfg := testConfig(t, `
admin: {address: "127.0.0.1:0"}
queues: [{url: 'memory://`+name+`', handler: work}]
`)
	putN(t, "memory://"+name, messages)
	fake := clock.NewFake(time.Now())
	w, err := New(cfg, WithLogger(zap.NewNop()), withClock(fake))
	if err != nil {
		t.Fatal(err)
	}
	w.MustHandle("work", func(context.Context, *queue.Message) error { return nil })
	runWorker(t, w)
	l, _ := w.Listener(name)
	waitUntil(t, "the worker drains the queue", func() bool {
		if l.Stats().Deleted == messages {
			return true
		}
		fake.Advance(10 * time.Millisecond)
		return false
	})
	fake.Advance(time.Second) // a rate needs time to be over
	addr := w.AdminAddress()
	_, page := pageRequest(t, addr, "GET", admin.StatusPath, nil, nil)
	if got := cell(t, page, name, "processed"); got != fmt.Sprint(messages) {
		t.Errorf("processed %q, want %d", got, messages)
	}
	for _, class := range []string{"rate", "pickup", "calls"} {
		if got := cell(t, page, name, class); got == "n/a" || got == "—" || got == "0/s" {
			t.Errorf("%s is %q after a drain of %d messages", class, got, messages)
		}
	}
	if got := cell(t, page, name, "cost"); got != "n/a" {
		t.Errorf("the monthly cost is %q before the worker has run a minute (extrapolated from seconds)", got)
	}

	fake.Advance(2 * time.Minute)
	_, page = pageRequest(t, addr, "GET", admin.StatusPath, nil, nil)
	if got := cell(t, page, name, "cost"); !strings.HasPrefix(got, "$") {
		t.Errorf("the monthly cost is %q after two minutes", got)
	}
}

// The page's requeue button, over HTTP: refused without the token or a
// session (401), with a session but not its anti-forgery token (403), from
// another origin (403); with the session and its token it puts the message
// back on its queue and takes it off the poison queue.
func TestStatusPageRequeueNeedsTheSessionAndItsToken(t *testing.T) {
	t.Parallel()
	const token = "requeue-Fa8xLe2vKp"
	name := uniqueQueue("page-requeue")
	cfg := testConfig(t, `
admin: {address: "127.0.0.1:0", token: "`+token+`"}
queues: [{url: 'memory://`+name+`', handler: once, trigger: {enabled: true}}]
`)
	w, err := New(cfg, WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	w.MustHandle("once", func(context.Context, *queue.Message) error {
		if runs.Add(1) == 1 {
			return handler.Permanent(errors.New("the first run fails"))
		}
		return nil
	})
	runWorker(t, w)
	ctx := context.Background()
	if _, err := w.Put(ctx, name, []byte("again"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var pid string
	waitUntil(t, "the message is poisoned", func() bool {
		ms, err := w.PoisonPeek(ctx, name, 32)
		if err != nil || len(ms) != 1 {
			return false
		}
		pid = ms[0].PoisonID
		return true
	})
	addr := w.AdminAddress()
	resp, _ := pageRequest(t, addr, "POST", admin.LoginPath, url.Values{"token": {token}}, nil)
	c := sessionCookie(t, resp)
	_, page := pageRequest(t, addr, "GET", admin.StatusPath, nil, c)
	m := csrfField.FindStringSubmatch(page)
	if m == nil || !strings.Contains(page, `data-id="`+pid+`"`) {
		t.Fatalf("the page has no anti-forgery field or no row for poison message %s:\n%s", pid, page)
	}
	csrf := m[1]
	path := strings.Replace(admin.StatusRequeuePath, "{name}", name, 1)
	for _, tc := range []postCase{
		{"no token, no cookie", url.Values{"id": {pid}, "csrf": {csrf}}, nil, nil, http.StatusUnauthorized},
		{"cookie without the anti-forgery token", url.Values{"id": {pid}}, c, nil, http.StatusForbidden},
		{"cross-origin, with cookie and token", url.Values{"id": {pid}, "csrf": {csrf}}, c, []string{"Origin", "http://attacker.example", "Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
	} {
		if resp, body := pageRequest(t, addr, "POST", path, tc.form, tc.cookie, tc.headers...); resp.StatusCode != tc.want {
			t.Errorf("%s: %s, want %d\n%s", tc.name, resp.Status, tc.want, body)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("a refused requeue ran the message: %d runs", runs.Load())
	}
	resp, body := pageRequest(t, addr, "POST", path, url.Values{"id": {pid}, "csrf": {csrf}}, c, "Origin", "http://"+addr, "Sec-Fetch-Site", "same-origin")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("requeue with the session and its token: %s\n%s", resp.Status, body)
	}
	waitUntil(t, "the requeued message runs again on its queue", func() bool { return runs.Load() == 2 })
	if ms, err := w.PoisonPeek(ctx, name, 32); err != nil || len(ms) != 0 {
		t.Errorf("the poison queue after the requeue: %d messages, %v", len(ms), err)
	}
	_, page = pageRequest(t, addr, "GET", resp.Header.Get("Location"), nil, c)
	if !strings.Contains(page, "Requeued 1 message of "+name+".") || !strings.Contains(page, "No poisoned messages.") {
		t.Errorf("the page after the requeue:\n%s", page)
	}
	// An id that is not there: nothing requeued, said so.
	resp, _ = pageRequest(t, addr, "POST", path, url.Values{"id": {pid}, "csrf": {csrf}}, c)
	_, page = pageRequest(t, addr, "GET", resp.Header.Get("Location"), nil, c)
	if !strings.Contains(page, "Requeued 0 messages of "+name+". 1 was not in the poison queue") {
		t.Errorf("the page after requeuing a message that is gone:\n%s", page)
	}
}
