//go:build race

package listener_test

// raceEnabled reports a -race build, whose slower handlers move batches
// from the inline dispatch to parallel runners, and their allocations.
const raceEnabled = true
