package listener

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
)

// The rate limit of the lines a listener writes for handler failures.
const (
	// DefaultFailureLogLines is how many handler failures one listener (one
	// queue) logs per DefaultFailureLogInterval. Ten lines show an operator
	// the error and its variety; a broken downstream under a full pool fails
	// hundreds of messages a second, which would bury every other line.
	DefaultFailureLogLines = 10
	// DefaultFailureLogInterval is the window of DefaultFailureLogLines:
	// failures left out are summed up at least this often while they go on.
	DefaultFailureLogInterval = 10 * time.Second
)

// failureLog bounds the lines a listener writes for handler failures to
// lines per interval, in fixed windows: a window opens at the first failure
// after the previous one closed. Failures past the bound are counted and
// summed up in one line, written before the first failure line of a later
// window, or by flush when the listener stops. It is safe for concurrent
// use and takes one mutex, on failures only.
type failureLog struct {
	log      *zap.Logger
	clock    clock.Clock
	lines    int // < 1: no limit
	interval time.Duration

	mu        sync.Mutex
	start     time.Time // the current window's start; zero before the first
	logged    int       // lines written in the current window
	left      int64     // failures not logged and not yet summed up
	firstLeft time.Time // when the first of them failed
	lastLeft  time.Time // when the last of them failed
}

// allow reports whether a failure happening now may be logged. It writes
// the summary of failures left out in earlier windows first.
func (f *failureLog) allow() bool {
	if f.lines < 1 {
		return true
	}
	now := f.clock.Now()
	f.mu.Lock()
	if f.start.IsZero() || now.Sub(f.start) >= f.interval {
		f.start, f.logged = now, 0
		f.summarizeLocked()
	}
	ok := f.logged < f.lines
	if ok {
		f.logged++
	} else {
		if f.left == 0 {
			f.firstLeft = now
		}
		f.left++
		f.lastLeft = now
	}
	f.mu.Unlock()
	return ok
}

// flush writes the summary of the failures left out so far, if any: the
// listener stops, and no later failure would write it.
func (f *failureLog) flush() {
	f.mu.Lock()
	f.summarizeLocked()
	f.mu.Unlock()
}

// summarizeLocked writes one line for the failures left out, and starts
// counting again. f.mu is held, so that a summary and the next window's
// count never overlap; the line is written once per window at most.
func (f *failureLog) summarizeLocked() {
	if f.left == 0 {
		return
	}
	f.log.Warn("listener: more handler failures than the log's rate limit; these were not logged",
		zap.Int64("not_logged", f.left),
		zap.Duration("within", f.lastLeft.Sub(f.firstLeft)),
		zap.Time("since", f.firstLeft),
		zap.String("limit", fmt.Sprintf("%d per %s", f.lines, f.interval)))
	f.left = 0
}

// logFailure writes the line of a handler failure whose message stays in
// the queue, within the rate limit: at warn, or at error for a permanent
// failure (it needs a human) or a message that will not run again. r is
// what becomes of the message (see planRetry): the line says whether it
// runs again, and its delay how long it is hidden first (none: until its
// visibility timeout ends).
func (l *Listener) logFailure(m *queue.Message, err error, r retry) {
	lvl, msg := zapcore.WarnLevel, "listener: handler failed; the message will run again"
	switch {
	case r.fate == expired:
		lvl, msg = zapcore.ErrorLevel, "listener: handler failed after the message expired; it will not run again"
	case r.fate == tooLate:
		lvl, msg = zapcore.ErrorLevel, "listener: handler failed too close to the message's expiry to be retried; it will not run again"
	case handler.IsPermanent(err):
		lvl, msg = zapcore.ErrorLevel, "listener: handler failed permanently"
	case r.fate == runsSooner:
		msg = "listener: handler failed; the message will run again, hidden for less than its retry delay so that it runs before it expires"
	}
	ce := l.log.Check(lvl, msg)
	if ce == nil || !l.failLog.allow() {
		return
	}
	delay := time.Duration(0)
	if r.hide {
		delay = r.delay
	}
	fields := failureFields(m, err, delay)
	if r.fate != runsAgain {
		fields = append(fields, zap.Time("expires_at", m.ExpiresAt))
	}
	if r.fate == runsSooner && r.wanted > r.delay {
		fields = append(fields, zap.Duration("retry_delay", r.wanted))
	}
	ce.Write(fields...)
}

// failureFields are the fields of a failure line: the message, the error
// and, where the error has them, the command's exit code or the HTTP
// status, so that logs can be searched by them.
func failureFields(m *queue.Message, err error, delay time.Duration) []zap.Field {
	fields := make([]zap.Field, 0, 5)
	fields = append(fields, zap.String("msg_id", m.ID), zap.Int("dequeue_count", m.DequeueCount), zap.Error(err))
	if delay > 0 {
		fields = append(fields, zap.Duration("delay", delay))
	}
	if xe, ok := errors.AsType[*handler.ExitError](err); ok {
		fields = append(fields, zap.Int("exit_code", xe.Code))
	}
	if se, ok := errors.AsType[*handler.StatusError](err); ok {
		fields = append(fields, zap.Int("status_code", se.StatusCode))
	}
	return fields
}
