//go:build !unix

package bench

import "time"

func maxRSS() (int64, bool) { return 0, false }

func cpuTime() (time.Duration, bool) { return 0, false }

func rusageDetail() (sys time.Duration, vol, invol int64, ok bool) { return 0, 0, 0, false }
