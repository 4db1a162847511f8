package listener

import "time"

// PacingTasks is the number of tasks waiting out the cadence after a get
// that found the queue drained, for tests in virtual time.
func (l *Listener) PacingTasks() int { return int(l.pacing.Load()) }

// RememberedFailures is how many messages' last failures the listener
// remembers for their poisoning.
func (l *Listener) RememberedFailures() int {
	return l.failures.remembered()
}

// ParkedTasks counts tasks parked on a timer of the clock.
func (l *Listener) ParkedTasks() int { return int(l.parked.Load()) }

// SetStallAfter sets how long an inline batch runs before it spills, for
// a count of instructions under valgrind; it returns the old.
func SetStallAfter(d time.Duration) time.Duration {
	old := stallAfter
	stallAfter = d
	return old
}

// SetSequentialBelow sets the handler time under which a batch runs
// inline, for a count of instructions under valgrind; it returns the old.
func SetSequentialBelow(d time.Duration) time.Duration {
	old := sequentialBelow
	sequentialBelow = d
	return old
}
