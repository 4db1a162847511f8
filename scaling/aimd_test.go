package scaling_test

import (
	"container/heap"
	"testing"
	"time"

	"github.com/adaptq/adaptq/scaling"
)

// downstream is a service with a capacity of concurrent requests: a
// request beyond it is refused (a 503) after refuseAfter; one within it
// succeeds after service.
type downstream struct {
	capacity int
	busy     int
}

type call struct {
	end      time.Duration
	start    time.Duration
	accepted bool
}

type calls []call

func (c calls) Len() int           { return len(c) }
func (c calls) Less(i, j int) bool { return c[i].end < c[j].end }
func (c calls) Swap(i, j int)      { c[i], c[j] = c[j], c[i] }
func (c *calls) Push(x any)        { *c = append(*c, x.(call)) }
func (c *calls) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

// An adaptive limit against a downstream whose capacity is 40, then
// halves to 20, then doubles back to 40, with a backlog that never ends:
// in virtual time, by the end of each 60 s phase, every limit sampled
// over its last 20 s is within 20 % of the capacity.
func TestAIMDConvergesNearACapacityThatHalvesAndDoubles(t *testing.T) {
	const (
		service     = 100 * time.Millisecond
		refuseAfter = 5 * time.Millisecond
		phase       = 60 * time.Second
		settled     = 20 * time.Second
	)
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a, err := scaling.NewAIMD(scaling.AIMDOptions{Min: 1, Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	caps := []int{40, 20, 40}
	d := &downstream{capacity: caps[0]}
	var inFlight calls
	now := time.Duration(0)
	start := func() {
		for len(inFlight) < a.Limit() {
			c := call{start: now, accepted: d.busy < d.capacity}
			if c.accepted {
				d.busy++
				c.end = now + service
			} else {
				c.end = now + refuseAfter
			}
			heap.Push(&inFlight, c)
		}
	}
	sample := time.Duration(0)
	lows, highs := make([]int, len(caps)), make([]int, len(caps))
	for i := range caps {
		lows[i] = 1 << 30
	}
	start()
	for now < phase*time.Duration(len(caps)) {
		c := heap.Pop(&inFlight).(call)
		for sample <= c.end {
			p := int(sample / phase)
			if p < len(caps) && sample%phase >= phase-settled {
				lows[p] = min(lows[p], a.Limit())
				highs[p] = max(highs[p], a.Limit())
			}
			sample += 100 * time.Millisecond
		}
		now = c.end
		d.capacity = caps[min(int(now/phase), len(caps)-1)]
		oc := scaling.Overloaded
		if c.accepted {
			d.busy--
			oc = scaling.Succeeded
		}
		a.Observe(epoch.Add(c.start), c.end-c.start, oc, len(inFlight)+1, epoch.Add(now))
		start()
	}
	for i, c := range caps {
		lo, hi := float64(c)*0.8, float64(c)*1.2
		if float64(lows[i]) < lo || float64(highs[i]) > hi {
			t.Errorf("capacity %d (phase %d): the limit ranged %d..%d over the phase's last %s, want within %.0f..%.0f", c, i+1, lows[i], highs[i], settled, lo, hi)
		}
	}
}

// Overload signals from calls sent before the last cut do not cut again:
// one round trip of refusals cuts once.
func TestAIMDCutsOncePerRoundTrip(t *testing.T) {
	a, err := scaling.NewAIMD(scaling.AIMDOptions{Min: 1, Max: 100, Initial: 50})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 20 {
		a.Observe(t0, time.Millisecond, scaling.Overloaded, 50, t0.Add(time.Duration(i+1)*time.Millisecond))
	}
	if l := a.Limit(); l != 45 {
		t.Fatalf("limit %d after 20 refusals of calls sent together, want 45 (one cut by 0.9)", l)
	}
	if cuts, signals := a.Cuts(); cuts != 1 || signals != 20 {
		t.Fatalf("%d cuts, %d signals; want 1 and 20", cuts, signals)
	}
	// Failures that are not overload change nothing; successes slower
	// than twice the usual time do not raise it (until the usual time, a
	// slow average, has moved to them: after about 30 of them).
	a.Observe(t0, time.Millisecond, scaling.Failed, 50, t0.Add(time.Second))
	a.Observe(t0, 10*time.Millisecond, scaling.Succeeded, 50, t0.Add(time.Second))
	for range 25 {
		a.Observe(t0, 100*time.Millisecond, scaling.Succeeded, 50, t0.Add(time.Second))
	}
	if l := a.Limit(); l != 45 {
		t.Fatalf("limit %d after slow successes, want 45: latency did not hold", l)
	}
}
