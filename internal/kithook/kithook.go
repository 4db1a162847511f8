// Package kithook links package adaptqtest, the test kit users import, to
// unexported parts of the packages it drives, so that what only a test kit
// needs stays off their public API (as the standard library's
// internal/testlog links package testing to package os). Each hook is set
// by its package's init; nothing else may set or call them.
package kithook

import "github.com/adaptq/adaptq/internal/clock"

var (
	// Activity (set by package listener) says how many of a
	// *listener.Listener's tasks are parked on a timer of its clock (an
	// idle sleep, the cadence after a partial get, a pause, an error
	// backoff), counted once the timer exists, and how much of its work
	// runs outside its tasks' loops (open batches, until their deletes are
	// done; flushes) not counting batches whose unfinished messages are
	// all held, and how many messages its runners hold through a worker
	// fault's pause (their leases renewed on the clock). With every task
	// parked, nothing busy and nothing in flight but the held messages,
	// the listener does nothing until the clock moves or a trigger comes.
	Activity func(l any) (parked, busy, held int)

	// WorkerClock (set by package adaptq) returns the adaptq.Option that
	// runs a worker's listeners, agents and samplers on c.
	WorkerClock func(c clock.Clock) any

	// ParseConfig (set by package adaptq) is adaptq.LoadConfig for YAML
	// already read (baseDir: the file's directory), with each queue's url
	// replaced by swap(i, url, name) after the environment's overrides and
	// before validation; it returns an adaptq.Config. A swap error is
	// reported as the queue's url problem.
	ParseConfig func(source string, data []byte, baseDir string, swap func(i int, url, name string) (string, error)) (any, error)
)
