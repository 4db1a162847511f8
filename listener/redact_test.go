package listener_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
)

// leakyError is what a downstream's error often looks like: the request
// URL with its signature, a token and a password quoted in free text.
const leakyError = `PUT https://acct.blob.core.windows.net/c/b?sv=2023-01-03&sig=SIGSECRET%3D: 403; ` +
	`retrying via https://user:PWSECRET@backup.example/x; token=TOKSECRET; Authorization: Bearer BEARERSECRET`

var leakySecrets = []string{"SIGSECRET", "PWSECRET", "TOKSECRET", "BEARERSECRET"}

// A failure's reason is redacted once, where the listener receives it, so
// every sink sees the same redacted text: the failure line, the poison
// line and the poison envelope (which the poison API, the CLI and the
// status page read); errors.As still finds the handler's own error.
func TestFailureReasonIsRedactedForEverySink(t *testing.T) {
	var sawStatus bool
	h := func(_ context.Context, m *queue.Message) error {
		return fmt.Errorf("upload: %s: %w", leakyError, errors.New("downstream refused"))
	}
	core, logs := observer.New(zap.DebugLevel)
	o := listener.Options{MaxDequeueCount: 2, VisibilityTimeout: 10 * time.Second, Idle: poisonIdle, Logger: zap.New(core)}
	o.RetryDelay = func(_ *queue.Message, err error) time.Duration {
		sawStatus = strings.Contains(err.Error(), "REDACTED") && errors.Unwrap(errors.Unwrap(err)) != nil
		return 0
	}
	f, pq := poisonFixture(t, h, o, nil)
	f.put(1)
	f.start()
	for step := 0; f.l.Stats().Poisoned == 0 && step < 1000; step++ {
		f.settle()
		f.clock.AdvanceToNext()
	}
	if f.l.Stats().Poisoned != 1 {
		t.Fatalf("stats %+v: want the message poisoned after 2 runs", f.l.Stats())
	}
	if !sawStatus {
		t.Errorf("RetryDelay saw an unredacted error, or one that no longer wraps the handler's")
	}
	pm := onlyPoison(t, pq)
	sinks := map[string]string{"poison envelope": pm.Reason}
	for i, e := range logs.All() {
		sinks[fmt.Sprintf("log line %d %q", i, e.Message)] = fmt.Sprint(e.ContextMap())
	}
	for sink, text := range sinks {
		for _, s := range leakySecrets {
			if strings.Contains(text, s) {
				t.Errorf("%s shows %s: %s", sink, s, text)
			}
		}
	}
	if !strings.Contains(pm.Reason, "sig=REDACTED") || !strings.Contains(pm.Reason, "downstream refused") {
		t.Errorf("envelope reason %q: want the error, its secrets redacted", pm.Reason)
	}
	if n := len(logs.FilterMessage(failedMsg).All()); n != 1 {
		t.Errorf("%d failure lines, want 1", n)
	}
}

// A permanent failure keeps its mark through the redaction.
func TestRedactedFailureStaysPermanent(t *testing.T) {
	h := func(context.Context, *queue.Message) error {
		return handler.Permanent(errors.New("bad body; see https://x.example/doc?token=TOKSECRET"))
	}
	f, pq := poisonFixture(t, h, listener.Options{Idle: poisonIdle}, nil)
	f.put(1)
	f.start()
	eventually(t, "the message is poisoned at once", func() bool { return f.l.Stats().Poisoned == 1 })
	if pm := onlyPoison(t, pq); strings.Contains(pm.Reason, "TOKSECRET") || string(pm.Rule) != "permanent" {
		t.Fatalf("poisoned %+v", pm)
	}
}
