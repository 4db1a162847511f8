package statuspage_test

// The status page in a real browser: headless Chromium (Debian's chromium
// package; `make test` installs it when /usr/bin/chromium is missing),
// driven with chromedp against a running worker. Without Chromium the test
// skips, naming what is missing, unless CI=true, where it fails.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.uber.org/zap"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/statuspage"
	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/queue"
	_ "github.com/adaptq/adaptq/queue/sqlite"
)

// screenshot, if set, is where TestStatusPageInABrowser saves a PNG of the
// page with its poisoned message (the README's picture: make screenshot).
var screenshot = flag.String("screenshot", "", "save a PNG of the status page to this file")

// chromiumPaths are where Chromium is looked for, Debian's first.
var chromiumPaths = []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"}

// findChromium returns Chromium's path, or skips the test (fails it under
// CI=true) naming what is missing.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, p := range chromiumPaths {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	msg := "no Chromium (looked for /usr/bin/chromium and chromium, chromium-browser, google-chrome on PATH): apt-get install -y chromium, or run make test, which installs it"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// newBrowser starts a headless Chromium with a fresh profile for the test
// and returns a context that drives one tab of it. The flags keep it from
// reaching for the network on its own: this machine's closed network
// refuses those connections, and a test must not depend on them.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path := findChromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true), // root in a container has no user namespace for it
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("mute-audio", true),
		chromedp.WindowSize(1280, 800),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	tab, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	// The first run starts the browser and binds it to its context: that
	// one has no deadline; the test's steps get a hang guard.
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("starting Chromium %s: %v", path, err)
	}
	ctx, cancelRun := context.WithTimeout(tab, testutil.HangGuard)
	t.Cleanup(cancelRun)
	return ctx
}

// browserToken is the admin token of the test's worker: the browser logs
// in with it through the page's form.
const browserToken = "browser-Tq6wMz3kJh"

// statusWorker runs a worker with an admin endpoint (token browserToken)
// and one queue, jobs, whose handler fails permanently for a body starting
// with "poison" while *broken is true; it returns the worker and the page's
// URL.
func statusWorker(t *testing.T, broken *atomic.Bool, handled *testutil.SyncBuffer) (*adaptq.Worker, string) {
	t.Helper()
	cfg, err := adaptq.ParseConfig("browser.yaml", []byte(`
admin: {address: "127.0.0.1:0", token: "`+browserToken+`"}
queues:
  - url: 'sqlite://`+filepath.Join(t.TempDir(), "q.db")+`?queue=jobs'
    trigger: {enabled: true}
    idle: {max: 200ms}
  - url: 'sqlite://`+filepath.Join(t.TempDir(), "q.db")+`?queue=emails'
    handler: jobs
    idle: {max: 200ms}
    concurrency: auto
    adaptive_concurrency: {min: 2, max: 30}
    rate_limit: {per_second: 50}
`))
	if err != nil {
		t.Fatal(err)
	}
	w, err := adaptq.New(cfg, adaptq.WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	w.MustHandle("jobs", func(_ context.Context, m *queue.Message) error {
		if broken.Load() && strings.HasPrefix(string(m.Body), "poison") {
			return handler.Permanent(errors.New(`downstream answered 422 <b>Unprocessable</b> for order 42`))
		}
		fmt.Fprintf(handled, "%s\n", m.Body)
		return nil
	})
	testutil.RunInBackground(t, w)
	return w, "http://" + w.AdminAddress() + admin.StatusPath
}

// pageText returns the text of the first element sel matches on the page
// now, or "" if none does (or the page is between two loads).
func pageText(ctx context.Context, sel string) string {
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? e.textContent.trim() : ""; })()`, sel)
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
	if err != nil {
		return ""
	}
	return s
}

// waitFor polls cond until it holds, and fails the test naming what it
// waited for if the hang guard passes first.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testutil.HangGuard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", testutil.HangGuard, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStatusPageInABrowser logs in with the token through the page's form,
// watches the page reload itself, finds the queue's row and the poisoned
// message with its reason, clicks requeue and sees the message back on its
// queue and off the poison queue.
func TestStatusPageInABrowser(t *testing.T) {
	var broken atomic.Bool
	broken.Store(true)
	var handled testutil.SyncBuffer
	w, page := statusWorker(t, &broken, &handled)
	ctx := newBrowser(t)

	bg := context.Background()
	put := func(body string) {
		t.Helper()
		if _, err := w.Put(bg, "jobs", []byte(body), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		put(fmt.Sprintf("order %d", i))
	}
	poisonID, err := w.Put(bg, "jobs", []byte("poison order 42"), queue.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l, ok := w.Listener("jobs")
	if !ok {
		t.Fatal("no listener for jobs")
	}
	waitFor(t, "the three good messages are handled and the bad one poisoned", func() bool {
		return strings.Count(handled.String(), "\n") == 3 && l.Stats().Poisoned == 1
	})

	// Without the cookie the page is the login form; a wrong token is
	// refused, the right one logs in.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token"),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS("#login-failed")),
		chromedp.SendKeys(chromedp.CSS("#token"), browserToken),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS("#queues")),
	); err != nil {
		t.Fatalf("logging in: %v", err)
	}
	const row = `#queues tr[data-queue="jobs"]`
	for cell, want := range map[string]string{"processed": "3", "poisoned": "1", "depth": "0"} {
		if got := pageText(ctx, row+" ."+cell); got != want {
			t.Errorf("the row of jobs shows %s %q, want %q", cell, got, want)
		}
	}

	// Flow control: the adaptive limit with its bounds, the rate limit.
	if got := pageText(ctx, `#queues tr[data-queue="emails"] .concurrency`); !strings.Contains(got, "2 of auto 2–30") || !strings.Contains(got, "50/s, burst 32") {
		t.Errorf("the row of emails shows concurrency %q, want the limit 2 of auto 2–30 and 50/s, burst 32", got)
	}
	if got := pageText(ctx, row+" .concurrency"); got != "64" {
		t.Errorf("the row of jobs shows concurrency %q, want 64", got)
	}

	// The page reloads itself: a message handled now shows up without a
	// click.
	put("order 3")
	waitFor(t, "the page, reloading itself, shows the fourth message processed", func() bool {
		return pageText(ctx, row+" .processed") == "4"
	})

	// The poisoned message, with its original id and its reason, shown as
	// text (the reason's markup escaped).
	const poisoned = `section[data-queue="jobs"] tr.poisoned-message`
	if got := pageText(ctx, poisoned+" td.mono"); got != poisonID {
		t.Errorf("the poisoned message shows id %q, want the original %q", got, poisonID)
	}
	if got := pageText(ctx, poisoned+" .reason"); !strings.Contains(got, "downstream answered 422 <b>Unprocessable</b> for order 42") {
		t.Errorf("the poisoned message's reason reads %q", got)
	}
	if got := pageText(ctx, poisoned+" .preview"); got != "poison order 42" {
		t.Errorf("the poisoned message's preview reads %q", got)
	}
	if *screenshot != "" {
		// The picture shows a worker that has run a while: traffic on
		// both queues for a minute, so that the cost a month (never
		// scaled from less than a minute) has a figure.
		for end := time.Now().Add(adaptq.MinExtrapolation + 5*time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			put("order")
			if _, err := w.Put(bg, "emails", []byte("welcome"), queue.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "the page shows the cost a month", func() bool {
			return strings.HasPrefix(pageText(ctx, row+" .cost"), "$")
		})
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*screenshot, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("saved %s (%d bytes)", *screenshot, len(png))
	}

	// The downstream is fixed; requeue, on the paused page so that no
	// reload comes between the look and the click.
	broken.Store(false)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(page+"?"+statuspage.PauseQuery),
		chromedp.WaitVisible(chromedp.CSS(poisoned+" button.requeue")),
		chromedp.Click(chromedp.CSS(poisoned+" button.requeue")),
		chromedp.WaitVisible(chromedp.CSS("#notice")),
	); err != nil {
		t.Fatalf("clicking requeue: %v", err)
	}
	if got := pageText(ctx, "#notice"); got != "Requeued 1 message of jobs." {
		t.Errorf("after requeue the page says %q", got)
	}
	// Back on its queue: the handler gets it there and it is done; off the
	// poison queue.
	waitFor(t, "the requeued message is handled from its queue", func() bool {
		return strings.Contains(handled.String(), "poison order 42\n")
	})
	left, err := w.PoisonPeek(bg, "jobs", 32)
	if err != nil || len(left) != 0 {
		t.Errorf("the poison queue after the requeue: %d messages, %v", len(left), err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(page+"?"+statuspage.PauseQuery), chromedp.WaitVisible(chromedp.CSS("#queues"))); err != nil {
		t.Fatal(err)
	}
	if got := pageText(ctx, `section[data-queue="jobs"] .empty`); got != "No poisoned messages." {
		t.Errorf("the poison section after the requeue reads %q", got)
	}
}

// rowIDs returns the poison ids of the poisoned messages of jobs the page
// shows now.
func rowIDs(ctx context.Context) []string {
	js := `Array.from(document.querySelectorAll('section[data-queue="jobs"] tr.poisoned-message')).map(e => e.dataset.id)`
	ids, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](js))
	if err != nil {
		return nil
	}
	return ids
}

// Issue 26, item 3: the page showed the poisoned messages one peek shows
// (the first 32) and no way to the others. It now shows a page of the
// poison listing, one backend call, with a link to the next page after a
// cursor; paging through them shows each message once and gets none of
// them (their dequeue counts in the poison queue stay 0).
func TestStatusPagePagesThePoisonQueue(t *testing.T) {
	var broken atomic.Bool
	broken.Store(true)
	var handled testutil.SyncBuffer
	w, page := statusWorker(t, &broken, &handled)
	ctx := newBrowser(t)
	bg := context.Background()
	const n = statuspage.PoisonPageSize*2 + 5
	for i := range n {
		if _, err := w.Put(bg, "jobs", fmt.Appendf(nil, "poison %d", i), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	l, ok := w.Listener("jobs")
	if !ok {
		t.Fatal("no listener for jobs")
	}
	waitFor(t, "every message is poisoned", func() bool { return l.Stats().Poisoned == n })
	if err := chromedp.Do(ctx,
		chromedp.Navigate(page+"?"+statuspage.PauseQuery),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), browserToken),
		chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS("#queues")),
		chromedp.Navigate(page+"?"+statuspage.PauseQuery),
		chromedp.WaitVisible(chromedp.CSS("#queues")),
	); err != nil {
		t.Fatalf("logging in: %v", err)
	}
	seen := map[string]bool{}
	for pages := 1; ; pages++ {
		ids := rowIDs(ctx)
		if len(ids) == 0 || len(ids) > statuspage.PoisonPageSize {
			t.Fatalf("page %d shows %d poisoned messages, want 1..%d", pages, len(ids), statuspage.PoisonPageSize)
		}
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("page %d shows %s again", pages, id)
			}
			seen[id] = true
		}
		if pageText(ctx, `section[data-queue="jobs"] a.next-page`) == "" {
			break
		}
		if pages > n {
			t.Fatal("the pages do not end")
		}
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`section[data-queue="jobs"] a.next-page`))); err != nil {
			t.Fatalf("clicking next page: %v", err)
		}
		waitFor(t, "the next page shows", func() bool {
			next := rowIDs(ctx)
			return len(next) > 0 && next[0] != ids[0]
		})
	}
	if len(seen) != n {
		t.Fatalf("the pages showed %d of the %d poisoned messages", len(seen), n)
	}
	pq, err := w.PoisonQueue("jobs")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := pq.Peek(bg, pq.Features().MaxPeek)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.DequeueCount != 0 {
			t.Fatalf("poison message %s: dequeue count %d after paging, want 0 (the page gets nothing)", m.ID, m.DequeueCount)
		}
	}
}
