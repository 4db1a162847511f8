package adaptq

import (
	"fmt"
	"strings"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
)

// A queue is ready while its last get succeeded and came no longer ago
// than ReadyCadences times its longest poll interval (idle.max, or
// trigger.safety_interval when a trigger lets idle tasks sleep that long),
// and never less than ReadyMinWindow: a healthy idle listener polls at
// least once per interval, so three missed polls in a row mean its gets
// hang. A listener busy with the messages it holds is ready however long
// ago it got them (its tasks wait for handler slots before they get).
const (
	ReadyCadences  = 3
	ReadyMinWindow = 30 * time.Second
)

// readyWindow is how long ago a queue's last successful get may be.
func readyWindow(o listener.Options) time.Duration {
	longest := o.Idle.Max
	if o.Notifier != nil {
		longest = max(longest, o.SafetyInterval)
	}
	if r := o.RateLimit; r.PerSecond > 0 {
		// A rate-limited task waits for a burst's tokens before it gets:
		// a slow limit (one message a minute) makes gets that rare.
		// A tiny rate's interval is capped at a year, not converted into
		// an overflowed (negative) Duration.
		interval := min(float64(max(r.Burst, 1))/r.PerSecond*float64(time.Second), float64(365*24*time.Hour))
		longest = max(longest, time.Duration(interval))
	}
	return max(ReadyCadences*longest, ReadyMinWindow)
}

// Readiness reports whether the worker is ready and, per queue, why or
// why not: what GET /readyz serves (admin.ReadyPath; /healthz says only
// that the process is alive).
func (w *Worker) Readiness() (ready bool, lines []string) {
	w.mu.Lock()
	running := w.running
	qs := append([]*workerQueue(nil), w.queues...)
	started := len(qs) > 0
	select {
	case <-w.ready:
	default:
		started = false
	}
	w.mu.Unlock()
	switch {
	case !running:
		return false, []string{"not running"}
	case !started:
		return false, []string{"starting: the queues are not all open yet"}
	case w.draining.Load():
		return false, []string{"shutting down: draining the listeners"}
	}
	now := w.clock.Now()
	ready = true
	for _, wq := range qs {
		st := wq.l.LocalState()
		if why := queueReady(wq.l.Options(), st.Stats, st.InFlight, now); why != "" {
			ready = false
			lines = append(lines, wq.name+": not ready: "+why)
			continue
		}
		lines = append(lines, fmt.Sprintf("%s: ok, last get %s ago", wq.name, ago(now, st.LastGet)))
	}
	return ready, lines
}

// queueReady returns "" when a queue whose listener has options o, stats
// st and held messages in hand is ready at now, else the reason.
func queueReady(o listener.Options, st listener.Stats, held int, now time.Time) string {
	switch {
	case st.LastGetFailed:
		since := "no get has succeeded yet"
		if !st.LastGet.IsZero() {
			since = fmt.Sprintf("the last successful one was %s ago", ago(now, st.LastGet))
		}
		return fmt.Sprintf("the last get failed %s ago (%s); %s", ago(now, st.LastGetError), redactLine(errText(st.LastGetErr)), since)
	case st.LastGet.IsZero():
		return "no get yet"
	}
	if held > 0 {
		return ""
	}
	if win := readyWindow(o); now.Sub(st.LastGet) > win {
		return fmt.Sprintf("no get for %s (more than %s: %d × the longest poll interval, at least %s); the backend may hang",
			ago(now, st.LastGet), win, ReadyCadences, ReadyMinWindow)
	}
	return ""
}

func ago(now, t time.Time) time.Duration {
	return max(now.Sub(t), 0).Round(time.Millisecond)
}

func errText(err error) string {
	if err == nil {
		return "unknown error"
	}
	return err.Error()
}

// redactLine hides the secrets in s (queue.RedactText) and keeps it to one
// line.
func redactLine(s string) string {
	return strings.Join(strings.Fields(queue.RedactText(s)), " ")
}
