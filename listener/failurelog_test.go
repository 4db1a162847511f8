package listener_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/scaling"
)

const (
	failedMsg    = "listener: handler failed; the message will run again"
	permanentMsg = "listener: handler failed permanently"
	tooLateMsg   = "listener: handler failed too close to the message's expiry to be retried; it will not run again"
	summaryMsg   = "listener: more handler failures than the log's rate limit; these were not logged"
)

// observed returns options whose logger records everything at info and
// above, and the recorded logs.
func observed(o listener.Options) (listener.Options, *observer.ObservedLogs) {
	core, logs := observer.New(zap.InfoLevel)
	o.Logger = zap.New(core)
	return o, logs
}

func TestHandlerFailureIsLoggedAtWarnWithItsFields(t *testing.T) {
	h := func(_ context.Context, m *queue.Message) error {
		if string(m.Body) == "m0" {
			return errors.New("downstream: 503 Service Unavailable")
		}
		return handler.Permanent(errors.New("bad body"))
	}
	o, logs := observed(listener.Options{})
	f := newFixture(t, h, o)
	ids := f.put(2)
	f.start()
	eventually(t, "both messages fail", func() bool { return f.l.Stats().Failed == 2 })
	f.settle()
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	check := func(id, msg string, lvl zapcore.Level, reason string) {
		t.Helper()
		got := logs.FilterMessage(msg).FilterField(zap.String("msg_id", id)).All()
		if len(got) != 1 {
			t.Fatalf("%d lines %q for %s, want 1; all logs: %v", len(got), msg, id, logs.All())
		}
		e := got[0]
		fields := e.ContextMap()
		if e.Level != lvl || fields["queue"] != "work" || fields["dequeue_count"] != int64(1) || fields["error"] != reason {
			t.Errorf("failure line %s %q %v, want level %s, queue work, dequeue_count 1, error %q", e.Level, e.Message, fields, lvl, reason)
		}
	}
	check(ids[0], failedMsg, zapcore.WarnLevel, "downstream: 503 Service Unavailable")
	check(ids[1], permanentMsg, zapcore.ErrorLevel, "bad body")
	if n := logs.FilterMessage(summaryMsg).Len(); n != 0 {
		t.Errorf("%d summaries of failures left out, with none left out", n)
	}
}

func TestFailureLinesAreRateLimitedWithASummary(t *testing.T) {
	fail := func(context.Context, *queue.Message) error { return errors.New("connection refused") }
	// The failed messages stay hidden for the whole test; idle tasks
	// sleep a virtual second at most.
	o, logs := observed(listener.Options{Tasks: 4, Concurrency: 128, Dispatch: listener.DispatchParallel,
		VisibilityTimeout: time.Hour, Idle: scaling.IdleBackoff{Max: time.Second}})
	f := newFixture(t, fail, o)
	const burst = 1000
	f.put(burst)
	f.start()
	// The fake clock stands still: the whole burst falls in one window.
	eventually(t, "the burst fails", func() bool { return f.l.Stats().Failed == burst })
	f.settle() // every failure is counted before it is logged: wait until none is in flight
	if n := logs.FilterMessage(failedMsg).Len(); n != listener.DefaultFailureLogLines {
		t.Fatalf("%d failure lines for a burst of %d, want the limit, %d", n, burst, listener.DefaultFailureLogLines)
	}
	if n := logs.FilterMessage(summaryMsg).Len(); n != 0 {
		t.Fatalf("a summary within the window: %v", logs.FilterMessage(summaryMsg).All())
	}

	// The next window's first failure is preceded by the summary of the
	// last one.
	f.clock.Advance(listener.DefaultFailureLogInterval)
	id := f.put(1)[0]
	eventually(t, "one more failure is logged", func() bool {
		if logs.FilterMessage(failedMsg).FilterField(zap.String("msg_id", id)).Len() == 1 {
			return true
		}
		f.clock.AdvanceToNext() // an idle task's next get
		return false
	})
	all := logs.All()
	var summary, next = -1, -1
	for i, e := range all {
		switch {
		case e.Message == summaryMsg:
			summary = i
		case e.Message == failedMsg && e.ContextMap()["msg_id"] == id:
			next = i
		}
	}
	if summary < 0 || next < 0 || summary > next {
		t.Fatalf("summary at line %d, next failure at line %d: want the summary first; logs %v", summary, next, all)
	}
	s := all[summary]
	if s.Level != zapcore.WarnLevel || s.ContextMap()["not_logged"] != int64(burst-listener.DefaultFailureLogLines) || s.ContextMap()["queue"] != "work" {
		t.Errorf("summary %s %v, want warn, not_logged %d, queue work", s.Level, s.ContextMap(), burst-listener.DefaultFailureLogLines)
	}
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessage(summaryMsg).Len(); n != 1 {
		t.Errorf("%d summaries, want 1: nothing was left out after it", n)
	}
}

// failAll runs a listener whose handler always fails over n messages,
// stops it once every message has failed, and returns its logs.
func failAll(t *testing.T, o listener.Options, n int) *observer.ObservedLogs {
	t.Helper()
	fail := func(context.Context, *queue.Message) error { return errors.New("exit status 3") }
	o, logs := observed(o)
	f := newFixture(t, fail, o)
	f.put(n)
	f.start()
	eventually(t, "every message fails", func() bool { return f.l.Stats().Failed == int64(n) })
	// A failure is counted before it is logged, and one still in flight
	// when the listener stops is handed back, not logged.
	f.settle()
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	return logs
}

func TestFailuresLeftOutAreSummedUpWhenTheListenerStops(t *testing.T) {
	logs := failAll(t, listener.Options{FailureLogLines: 3, FailureLogInterval: time.Hour}, 50)
	if n := logs.FilterMessage(failedMsg).Len(); n != 3 {
		t.Errorf("%d failure lines, want 3", n)
	}
	s := logs.FilterMessage(summaryMsg).All()
	if len(s) != 1 || s[0].ContextMap()["not_logged"] != int64(47) || s[0].ContextMap()["limit"] != "3 per 1h0m0s" {
		t.Fatalf("summaries at stop %v, want one with not_logged 47 and limit 3 per 1h0m0s", s)
	}
}

func TestNegativeFailureLogLinesLogsEveryFailure(t *testing.T) {
	logs := failAll(t, listener.Options{FailureLogLines: -1}, 40)
	if n := logs.FilterMessage(failedMsg).Len(); n != 40 {
		t.Errorf("%d failure lines for 40 failures without a limit", n)
	}
	if n := logs.FilterMessage(summaryMsg).Len(); n != 0 {
		t.Errorf("%d summaries without a limit", n)
	}
}

func TestFailureLogIntervalMustNotBeNegative(t *testing.T) {
	f := newFixture(t, newRecorder().handle, listener.Options{})
	_, err := listener.New(f.q, newRecorder().handle, listener.Options{FailureLogInterval: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "failure_log_interval: -1s") {
		t.Fatalf("New with a negative failure log interval: %v", err)
	}
}
