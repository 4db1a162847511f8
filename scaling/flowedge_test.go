package scaling_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/scaling"
)

// A huge rate (effectively no limit) takes a batch's burst, not one
// message's: the float's conversion to int must not overflow.
func TestDefaultRateBurstOfAHugeRateIsTheBatch(t *testing.T) {
	for _, r := range []float64{1e6, 1e19, 1e300} {
		if b := scaling.DefaultRateBurst(r, 32); b != 32 {
			t.Errorf("DefaultRateBurst(%g, 32) = %d, want 32", r, b)
		}
	}
}

// A tiny rate waits long, never a nanosecond: the wait's conversion to a
// Duration must not overflow into a busy loop.
func TestRateGateTinyRateWaitsLong(t *testing.T) {
	g, err := scaling.NewRateGate(1e-12, 1)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n, _ := g.Admit(t0, 1, 1)
	g.Commit(t0, n, n)
	if n, wait := g.Admit(t0, 1, 1); n != 0 || wait < 24*time.Hour {
		t.Fatalf("at 1e-12 a second, just after a token was taken: n %d, wait %s; want 0 and a long wait", n, wait)
	}
}

// NaN passes no bound: each field's error names it.
func TestAIMDOptionsRejectNaN(t *testing.T) {
	for _, c := range []struct {
		o    scaling.AIMDOptions
		want string
	}{
		{scaling.AIMDOptions{Backoff: math.NaN()}, "backoff: NaN"},
		{scaling.AIMDOptions{Tolerance: math.NaN()}, "tolerance: NaN"},
	} {
		if err := c.o.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %q", c.o, err, c.want)
		}
	}
}
