//go:build !unix

package bench

import "time"

func maxRSS() (int64, bool) { return 0, false }

func cpuTime() (time.Duration, bool) { return 0, false }
