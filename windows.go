package adaptq

import (
	"context"
	"sync"
	"time"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue/meter"
)

// The windows the worker reports activity over: what a queue did in the
// last minute and in the last hour, from samples of its counters.
const (
	// MinuteWindow is the short window: the rate a status page shows and
	// the drain rate the scaling signal uses.
	MinuteWindow = time.Minute
	// HourWindow is the long window: the cost of a steady state, idling
	// included (a triggered idle queue makes a call per safety interval,
	// 12 an hour at the default 5 minutes).
	HourWindow = time.Hour
	// MinExtrapolation is the shortest span a rate is scaled from to an
	// hour or a month: less than a minute of calls says nothing of a month
	// (the repro: 2 s after a drain, the calls since start made
	// 280,299 empty gets an hour).
	MinExtrapolation = time.Minute
	// WindowTick is how often the worker samples its counters: the minute
	// window's resolution. The hour window keeps one sample a minute.
	WindowTick = time.Second
)

// counterSample is a queue's cumulative counters at one moment.
type counterSample struct {
	at    time.Time
	meter meter.Snapshot
	stats listener.Stats
}

// sampleRing keeps the newest samples, each at least step after the one
// before, enough of them to reach back a whole span and one sample more.
type sampleRing struct {
	step time.Duration
	buf  []counterSample // oldest first once full: buf[next:], buf[:next]
	next int
}

func newSampleRing(span, step time.Duration) sampleRing {
	return sampleRing{step: step, buf: make([]counterSample, 0, int(span/step)+2)}
}

func (r *sampleRing) newest() (counterSample, bool) {
	if len(r.buf) == 0 {
		return counterSample{}, false
	}
	i := r.next - 1
	if i < 0 {
		i = len(r.buf) - 1
	}
	return r.buf[i], true
}

// add keeps s if it is at least a step after the newest sample.
func (r *sampleRing) add(s counterSample) {
	if last, ok := r.newest(); ok && s.at.Sub(last.at) < r.step {
		return
	}
	if len(r.buf) < cap(r.buf) {
		r.buf = append(r.buf, s)
		r.next = len(r.buf) % cap(r.buf)
		return
	}
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
}

// base is the sample a window of span ending at now starts from: the
// newest one at least span old, or the oldest if none is that old yet.
func (r *sampleRing) base(now time.Time, span time.Duration) (counterSample, bool) {
	var oldest, old counterSample
	hasOld := false
	for i, s := range r.buf {
		if i == 0 || s.at.Before(oldest.at) {
			oldest = s
		}
		if now.Sub(s.at) >= span && (!hasOld || s.at.After(old.at)) {
			old, hasOld = s, true
		}
	}
	if hasOld {
		return old, true
	}
	return oldest, len(r.buf) > 0
}

// queueWindows samples one queue's counters into a ring of seconds and a
// ring of minutes. It is safe for concurrent use.
type queueWindows struct {
	read func() counterSample // the counters now, at must be set by the caller

	mu      sync.Mutex
	seconds sampleRing
	minutes sampleRing
}

func newQueueWindows(read func() counterSample) *queueWindows {
	return &queueWindows{
		read:    read,
		seconds: newSampleRing(MinuteWindow, WindowTick),
		minutes: newSampleRing(HourWindow, time.Minute),
	}
}

// sample reads the counters at now and keeps them where a ring is due one.
func (qw *queueWindows) sample(now time.Time) counterSample {
	s := qw.read()
	s.at = now
	qw.mu.Lock()
	qw.seconds.add(s)
	qw.minutes.add(s)
	qw.mu.Unlock()
	return s
}

// windows samples at now and returns the last minute and the last hour.
func (qw *queueWindows) windows(now time.Time) (minute, hour admin.Window) {
	cur := qw.sample(now)
	qw.mu.Lock()
	bm, okm := qw.seconds.base(now, MinuteWindow)
	bh, okh := qw.minutes.base(now, HourWindow)
	qw.mu.Unlock()
	if okm {
		minute = window(MinuteWindow, bm, cur)
	}
	if okh {
		hour = window(HourWindow, bh, cur)
	}
	return minute, hour
}

// window is the activity between the samples from and to.
func window(span time.Duration, from, to counterSample) admin.Window {
	el := to.at.Sub(from.at)
	m := to.meter.Sub(from.meter)
	a, b := from.stats, to.stats
	w := admin.Window{
		Span: admin.Duration(span), Elapsed: admin.Duration(el), Full: el >= span,
		Processed: b.Processed - a.Processed, Failed: b.Failed - a.Failed,
		Deleted: b.Deleted - a.Deleted, Poisoned: b.Poisoned - a.Poisoned,
		CallFigures: callFigures(m), EmptyGets: m.Calls[meter.GetEmpty],
		PickedUp: b.PickedUp - a.PickedUp,
	}
	if secs := el.Seconds(); secs > 0 {
		w.Rate = float64(w.Processed) / secs
		w.DrainRate = float64(w.Deleted) / secs
	}
	if el >= MinExtrapolation {
		monthly := w.Cost * float64(meter.HoursPerMonth) / el.Hours()
		perHour := float64(w.EmptyGets) / el.Hours()
		w.MonthlyCost, w.EmptyGetsPerHour = &monthly, &perHour
	}
	if w.PickedUp > 0 {
		w.PickupLatency = admin.Duration((b.PickupLatency - a.PickupLatency) / time.Duration(w.PickedUp))
	}
	return w
}

// tickWindows samples every queue's counters each WindowTick of c until
// ctx ends.
func tickWindows(ctx context.Context, c clock.Clock, qs []*workerQueue) {
	for {
		if !clock.Sleep(ctx, c, WindowTick, nil) {
			return
		}
		now := c.Now()
		for _, wq := range qs {
			wq.win.sample(now)
		}
	}
}

// Windows returns every queue's last minute and last hour, from the
// worker's samples of its counters: no backend call. It is empty while the
// worker does not run.
func (w *Worker) Windows() []admin.QueueWindows {
	w.mu.Lock()
	qs := append([]*workerQueue(nil), w.queues...)
	w.mu.Unlock()
	now := w.clock.Now()
	out := make([]admin.QueueWindows, 0, len(qs))
	for _, wq := range qs {
		m, h := wq.win.windows(now)
		out = append(out, admin.QueueWindows{Name: wq.name, LastMinute: m, LastHour: h})
	}
	return out
}
