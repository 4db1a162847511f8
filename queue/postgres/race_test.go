//go:build race

package postgres_test

// raceEnabled reports a -race build, whose detector adds allocations of
// its own to what TestGetAllocsPerRow counts.
const raceEnabled = true
