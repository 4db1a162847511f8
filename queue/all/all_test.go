package all_test

import (
	"slices"
	"testing"

	"github.com/adaptq/adaptq/queue"
	_ "github.com/adaptq/adaptq/queue/all"
)

// Every scheme this module knows a driver for is registered by importing
// package all.
func TestAllRegistersEveryKnownScheme(t *testing.T) {
	for _, s := range queue.KnownSchemes() {
		if err := queue.CheckScheme(s); err != nil {
			t.Errorf("scheme %q: %v", s, err)
		}
	}
	if got := queue.Schemes(); !slices.Equal(got, queue.KnownSchemes()) {
		t.Errorf("registered %v, known %v", got, queue.KnownSchemes())
	}
}
