package sim

import (
	"testing"
	"time"
)

func TestArrivalsAreEvenlySpacedAndComplete(t *testing.T) {
	a := arrivals{phases: []Phase{
		{Duration: time.Second, Rate: 4},            // 0, 250, 500, 750 ms
		{Duration: time.Second},                     // nothing
		{Duration: time.Second, Burst: 10, Rate: 2}, // 10+1 at 2 s, 1 at 2.5 s
		{Duration: 24 * time.Hour, Rate: 1_000_000}, // 86.4e9 messages: offsets must not overflow
	}}
	a.init()
	type arrival struct {
		at time.Duration
		n  int
	}
	var got []arrival
	for len(got) < 7 {
		at, ok := a.next()
		if !ok {
			t.Fatal("ran out of arrivals")
		}
		got = append(got, arrival{time.Duration(at), a.take(at)})
	}
	want := []arrival{
		{0, 1}, {250 * time.Millisecond, 1}, {500 * time.Millisecond, 1}, {750 * time.Millisecond, 1},
		{2 * time.Second, 11}, {2500 * time.Millisecond, 1}, {3 * time.Second, 1},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("arrival %d = %+v, want %+v (all: %+v)", i, got[i], want[i], got)
		}
	}
	// The last of a day at a million a second comes a microsecond before
	// the day ends.
	if off := spread(86_399_999_999, 86_400_000_000, 24*time.Hour); time.Duration(off) != 24*time.Hour-time.Microsecond {
		t.Errorf("last offset %s", time.Duration(off))
	}
}

func TestPercentileIsNearestRank(t *testing.T) {
	var xs []time.Duration
	for i := 1; i <= 200; i++ {
		xs = append(xs, time.Duration(i))
	}
	for p, want := range map[int]time.Duration{50: 100, 99: 198, 100: 200} {
		if got := percentile(xs, p); got != want {
			t.Errorf("p%d = %d, want %d", p, got, want)
		}
	}
	if got := percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("p99 of one = %d", got)
	}
}

func TestFormatting(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 79200: "79,200", 15840000: "15,840,000", -1234: "-1,234"} {
		if got := group(n); got != want {
			t.Errorf("group(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{0: "0", 1500 * time.Microsecond: "1.5ms", 38100 * time.Millisecond: "38.1s", 942 * time.Second: "15m42s"} {
		if got := fmtLatency(d); got != want {
			t.Errorf("fmtLatency(%s) = %q, want %q", d, got, want)
		}
	}
	for d, want := range map[time.Duration]string{time.Hour: "1h", 90 * time.Minute: "1h30m", 15 * time.Minute: "15m", 90 * time.Second: "1m30s"} {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%s) = %q, want %q", d, got, want)
		}
	}
}
