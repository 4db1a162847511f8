package redis

import (
	"strings"
	"testing"
	"time"
)

// TestIDsGrowWithinAProcess: ids are 26 characters of Crockford's base32
// whose lexical order is the order they were made in, within one
// millisecond, across milliseconds, and when the clock steps back; the
// time part reads back as the clock's milliseconds.
func TestIDsGrowWithinAProcess(t *testing.T) {
	var s idSource
	at := time.UnixMilli(1_790_000_000_000)
	var prev string
	for i, now := range []time.Time{at, at, at, at.Add(time.Millisecond), at.Add(-time.Hour), at.Add(2 * time.Millisecond)} {
		id := s.newID(now)
		if len(id) != idLen || strings.Trim(id, crockford) != "" {
			t.Fatalf("id %q: want %d characters of %s", id, idLen, crockford)
		}
		if id <= prev {
			t.Fatalf("id %d %s does not sort after %s", i, id, prev)
		}
		prev = id
	}
	// The first 10 characters carry the 48-bit time (50 bits, the first
	// two zero: 128 bits in 26 characters).
	id := (&idSource{}).newID(at)
	var ms uint64
	for _, c := range id[:10] {
		ms = ms<<5 | uint64(strings.IndexRune(crockford, c))
	}
	if got := time.UnixMilli(int64(ms)); !got.Equal(at) {
		t.Fatalf("the time part of %s is %s, want %s", id, got, at)
	}
	if encodeID(0, 0, 0) != strings.Repeat("0", idLen) || encodeID(1<<48-1, 1<<16-1, 1<<64-1) != "7"+strings.Repeat("Z", idLen-1) {
		t.Fatalf("the ends of the range: %s, %s", encodeID(0, 0, 0), encodeID(1<<48-1, 1<<16-1, 1<<64-1))
	}
}
