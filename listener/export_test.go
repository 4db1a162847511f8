package listener

// PacingTasks is the number of tasks waiting out the cadence after a get
// that found the queue drained, for tests in virtual time.
func (l *Listener) PacingTasks() int { return int(l.pacing.Load()) }
