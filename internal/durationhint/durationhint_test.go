package durationhint

import (
	"strings"
	"testing"
)

func TestExplain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"8d", `write "192h"`},
		{"1.5d", `write "36h"`},
		{"2w", `write "336h"`},
		{"30", "a bare number has no unit"},
		{"1.00:00:00", "units: ns, us, ms, s, m, h"},
		{"soon", "units: ns, us, ms, s, m, h"},
	} {
		if got := Explain(tc.in); !strings.Contains(got, tc.want) {
			t.Errorf("Explain(%q) = %q, want it to contain %q", tc.in, got, tc.want)
		}
	}
}
