package admin

// Window is one queue's activity over a recent span, the differences of
// its counters between a sample at the window's start and now (the worker
// samples them: adaptq.MinuteWindow, adaptq.HourWindow).
type Window struct {
	// Span is the window asked for (1m, 1h). Elapsed is the time it covers:
	// at least Span once the worker has run that long (up to one sample
	// interval more), the whole run until then. Full says Elapsed ≥ Span.
	Span    Duration `json:"span"`
	Elapsed Duration `json:"elapsed"`
	Full    bool     `json:"full"`

	// Handler runs and messages, as the listener counts them.
	Processed int64 `json:"processed"`
	Failed    int64 `json:"failed"`
	Deleted   int64 `json:"deleted"`
	Poisoned  int64 `json:"poisoned"`
	// Rate is messages processed a second; DrainRate messages deleted a
	// second (the scaling signal's measure).
	Rate      float64 `json:"rate"`
	DrainRate float64 `json:"drain_rate"`

	// The backend calls in the window; EmptyGets are the gets that found
	// nothing (the cost of idling).
	CallFigures
	EmptyGets int64 `json:"empty_gets"`
	// MonthlyCost is Cost scaled to a 30-day month and EmptyGetsPerHour
	// the empty gets scaled to an hour; both are null when the window
	// covers less than adaptq.MinExtrapolation.
	MonthlyCost      *float64 `json:"monthly_cost"`
	EmptyGetsPerHour *float64 `json:"empty_gets_per_hour"`

	// PickupLatency is the mean time from put to first get of the PickedUp
	// messages first delivered in the window (0 if none was).
	PickupLatency Duration `json:"pickup_latency"`
	PickedUp      int64    `json:"picked_up"`
}

// QueueWindows is one queue's last minute and last hour.
type QueueWindows struct {
	Name       string `json:"name"`
	LastMinute Window `json:"last_minute"`
	LastHour   Window `json:"last_hour"`
}

// Current returns the window that gives the queue's current rate: the
// last hour once the worker has run an hour, else the last minute.
func (q QueueWindows) Current() Window {
	if q.LastHour.Full {
		return q.LastHour
	}
	return q.LastMinute
}
