//go:build race

package sim_test

// raceEnabled reports a -race build: the simulator's single goroutine
// gives the detector nothing to check, while it slows each call tenfold.
const raceEnabled = true
