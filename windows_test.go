package adaptq

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue/meter"
)

// fakeCounters stands in for a queue's meter and listener.
type fakeCounters struct{ deleted, emptyGets, gets atomic.Int64 }

func (c *fakeCounters) read() counterSample {
	var m meter.Snapshot
	m.PricePer10k = meter.DefaultPricePer10k
	m.Calls[meter.GetEmpty] = c.emptyGets.Load()
	m.Calls[meter.Get] = c.gets.Load()
	m.Calls[meter.Delete] = c.deleted.Load()
	m.MessagesDeleted = c.deleted.Load()
	d := c.deleted.Load()
	return counterSample{meter: m, stats: listener.Stats{Processed: d, Deleted: d, EmptyGets: c.emptyGets.Load()}}
}

// A steady call a second for two hours: the minute window holds 60 of them
// and the hour 3,600, whatever came before; the rings stay bounded.
func TestWindowsCountTheirSpanOnly(t *testing.T) {
	t.Parallel()
	var c fakeCounters
	qw := newQueueWindows(c.read)
	now := clock.Epoch
	qw.sample(now)
	c.deleted.Add(5000) // a burst at start, outside both windows two hours on
	for range 2 * 3600 {
		now = now.Add(time.Second)
		c.emptyGets.Add(1)
		qw.sample(now)
	}
	m, h := qw.windows(now)
	if !m.Full || time.Duration(m.Elapsed) != time.Minute || m.EmptyGets != 60 || m.Deleted != 0 {
		t.Errorf("last minute: %+v", m)
	}
	if !h.Full || time.Duration(h.Elapsed) != time.Hour || h.EmptyGets != 3600 || h.TotalCalls != 3600 {
		t.Errorf("last hour: %+v", h)
	}
	if m.EmptyGetsPerHour == nil || *m.EmptyGetsPerHour != 3600 || h.EmptyGetsPerHour == nil || *h.EmptyGetsPerHour != 3600 {
		t.Errorf("empty gets an hour: minute %v, hour %v, want 3600", m.EmptyGetsPerHour, h.EmptyGetsPerHour)
	}
	if want := meter.CostOf(3600*meter.HoursPerMonth, meter.DefaultPricePer10k); h.MonthlyCost == nil || !near(*h.MonthlyCost, want) {
		t.Errorf("monthly cost %v, want %v", h.MonthlyCost, want)
	}
	if len(qw.seconds.buf) > 62 || len(qw.minutes.buf) > 62 {
		t.Errorf("rings hold %d and %d samples", len(qw.seconds.buf), len(qw.minutes.buf))
	}
}

// Samples missed (a stalled ticker, a clock that jumped) widen a window,
// and Elapsed says by how much: counts are never scaled up.
func TestWindowsSayWhatTheyCover(t *testing.T) {
	t.Parallel()
	var c fakeCounters
	qw := newQueueWindows(c.read)
	qw.sample(clock.Epoch)
	c.gets.Add(7)
	m, h := qw.windows(clock.Epoch.Add(10 * time.Minute))
	for _, w := range []admin.Window{m, h} {
		if time.Duration(w.Elapsed) != 10*time.Minute || w.TotalCalls != 7 {
			t.Errorf("%s window: %+v", time.Duration(w.Span), w)
		}
	}
	if !m.Full || h.Full {
		t.Errorf("full: minute %v, hour %v", m.Full, h.Full)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
