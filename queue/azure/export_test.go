package azure

import "time"

// SetClearGrace sets how old a payload must be for Clear to delete it
// (ClearGrace by default), so that a test need not wait ten minutes to
// see Clear delete one. Set it before the account's queues are used.
func SetClearGrace(a *Account, d time.Duration) { a.clearGrace = d }

// SetClock sets the account's view of this host's clock (time.Now by
// default), for hosts whose clocks are wrong. Set it before the account's
// queues are used.
func SetClock(a *Account, now func() time.Time) { a.now = now }
