package handler

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/internal/clock"
)

// The rate limit of the exec output lines a queue logs (ExecOptions.Log
// and LogLimit), as log.exec_output in the worker's config.
const (
	// DefaultExecOutputLogLines is how many lines of exec output one queue
	// logs per DefaultExecOutputLogInterval: 1,000 a second on average,
	// enough for a line or two per message at the rates one worker
	// handles, while a handler that writes without end (1 GiB of output
	// wrote 317 MiB of log, issue 26) is held to at most 40 MiB of log per
	// window, its lines being cut at MaxLogLine.
	DefaultExecOutputLogLines = 10_000
	// DefaultExecOutputLogInterval is the window of
	// DefaultExecOutputLogLines, that of the failure lines' limit
	// (listener.DefaultFailureLogInterval): lines left out are summed up
	// at the end of each window in which some were.
	DefaultExecOutputLogInterval = 10 * time.Second
)

// LogLimit bounds the lines that Exec handlers sharing it log
// (ExecOptions.LogLimit) to Lines per Interval, in fixed windows: a window
// opens at the first line after the previous one closed. Lines past the
// bound are counted, and one warn line, at the end of the window, says how
// many were not logged. The zero value is not usable; make one with
// NewLogLimit. It is safe for concurrent use.
type LogLimit struct {
	log      *zap.Logger
	clock    clock.Clock
	lines    int
	interval time.Duration

	total atomic.Int64 // lines not logged, ever

	mu        sync.Mutex
	start     time.Time   // the current window's start; zero before the first
	logged    int         // lines logged in the current window
	left      int64       // lines not logged and not yet summed up
	firstLeft time.Time   // when the first of them came
	timer     clock.Timer // writes the summary at the window's end
}

// NewLogLimit returns a limit of lines per interval, which must both be
// positive. Its summaries go to log (which should name the queue); c is
// the clock of its windows (nil: the wall clock).
func NewLogLimit(lines int, interval time.Duration, log *zap.Logger, c clock.Clock) (*LogLimit, error) {
	if lines < 1 {
		return nil, fmt.Errorf("handler: log limit: lines %d is not positive", lines)
	}
	if interval <= 0 {
		return nil, fmt.Errorf("handler: log limit: interval %s is not positive", interval)
	}
	if log == nil {
		log = zap.NewNop()
	}
	if c == nil {
		c = clock.Real
	}
	return &LogLimit{log: log, clock: c, lines: lines, interval: interval}, nil
}

// Allow reports whether a line may be logged now, and counts it if not.
// A nil *LogLimit allows every line.
func (l *LogLimit) Allow() bool {
	if l == nil {
		return true
	}
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.start.IsZero() || now.Sub(l.start) >= l.interval {
		l.summarizeLocked(now)
		l.start, l.logged = now, 0
	}
	if l.logged < l.lines {
		l.logged++
		return true
	}
	if l.left == 0 {
		l.firstLeft = now
		start := l.start
		l.timer = l.clock.AfterFunc(start.Add(l.interval).Sub(now), func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.start.Equal(start) { // not summed up by a later window yet
				l.summarizeLocked(l.clock.Now())
			}
		})
	}
	l.left++
	l.total.Add(1)
	return false
}

// NotLogged is how many lines the limit has kept from the log so far.
func (l *LogLimit) NotLogged() int64 {
	if l == nil {
		return 0
	}
	return l.total.Load()
}

// Flush writes the summary of the lines left out so far, if any, at once:
// the worker stops, and the window's end may not come. A nil *LogLimit
// does nothing.
func (l *LogLimit) Flush() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.summarizeLocked(l.clock.Now())
}

// summarizeLocked writes one line for the lines left out, if any, and
// starts counting again; l.mu is held.
func (l *LogLimit) summarizeLocked(now time.Time) {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	if l.left == 0 {
		return
	}
	l.log.Warn("handler: exec output over the log's rate limit; these lines were not logged",
		zap.Int64("not_logged", l.left),
		zap.Time("since", l.firstLeft),
		zap.Duration("within", now.Sub(l.firstLeft)),
		zap.String("limit", fmt.Sprintf("%d lines per %s", l.lines, l.interval)))
	l.left = 0
}
