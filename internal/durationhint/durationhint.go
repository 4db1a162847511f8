// Package durationhint explains why a text is not a Go duration, for the
// messages of the config loader and the CLI's duration flags.
package durationhint

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Explain says, in a clause that follows the text it is about, why s is
// not a Go duration and what to write instead. The units people reach for
// that Go does not have (days, weeks) are converted for them.
func Explain(s string) string {
	t := strings.TrimSpace(s)
	if _, err := strconv.ParseFloat(t, 64); err == nil {
		return fmt.Sprintf(`a bare number has no unit; write a Go duration such as "%ss" or "%sm"`, t, t)
	}
	for _, u := range []struct {
		suffixes []string
		name     string
		d        time.Duration
	}{
		{[]string{"d", "day", "days"}, "days", 24 * time.Hour},
		{[]string{"w", "wk", "week", "weeks"}, "weeks", 7 * 24 * time.Hour},
	} {
		for _, suf := range u.suffixes {
			n, ok := strings.CutSuffix(t, suf)
			if !ok {
				continue
			}
			f, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
			if err != nil || f < 0 {
				continue
			}
			hours := f * u.d.Hours()
			return fmt.Sprintf(`Go durations have no %s; write "%sh" (the longest unit is h)`, u.name, strconv.FormatFloat(hours, 'f', -1, 64))
		}
	}
	return `write a Go duration such as "30s", "1m30s", "500ms" or "24h" (units: ns, us, ms, s, m, h)`
}
