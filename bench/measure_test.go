package bench

import (
	"testing"
	"time"

	"github.com/adaptq/adaptq/scaling"
)

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 200; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 100 * time.Millisecond}, {99, 198 * time.Millisecond}, {100, 200 * time.Millisecond}, {0.1, time.Millisecond}} {
		if got := percentile(ds, tc.p); got != tc.want {
			t.Errorf("p%v = %s, want %s", tc.p, got, tc.want)
		}
	}
	if ds[0] != 200*time.Millisecond {
		t.Error("percentile sorted its argument")
	}
}

func TestCommas(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -45000: "-45,000"} {
		if got := commas(n); got != want {
			t.Errorf("commas(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestCapIdleCount(t *testing.T) {
	for _, max := range []time.Duration{100 * time.Millisecond, 2 * time.Second, time.Minute} {
		b := idleBackoff(max)
		k := capIdleCount(b)
		if b.DelayWith(k, scaling.JitterMin) < max {
			t.Errorf("max %s: delay after %d empty gets can be below the cap", max, k)
		}
		if k > 1 && b.DelayWith(k-1, scaling.JitterMin) >= max {
			t.Errorf("max %s: %d is not the first count at the cap", max, k)
		}
	}
}
