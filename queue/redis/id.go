package redis

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Message ids are ULIDs (github.com/ulid/spec): 48 bits of the putting
// process's clock in milliseconds, then 80 random bits, written as 26
// characters of Crockford's base32, so that their lexical order is their
// numeric order. The client chooses the id, so a put whose reply was lost
// can be sent again under the same id and the script writes it only if it
// is absent (see Put). No counter on the server takes part: a server
// restored from an older snapshot, or a replica promoted after a failover,
// cannot hand out an id again. Within one process ids only grow (a clock
// that stands still or steps back keeps the last time and adds one to the
// random part), so the sorted set's ties, broken by id, keep the order of
// the puts; across processes ids are ordered only as far as their clocks
// agree, and no promise is made about that order.
type idSource struct {
	mu     sync.Mutex
	ms     uint64 // time part of the last id
	hi, lo uint64 // random part of the last id: 16 + 64 bits
}

// crockford is Crockford's base32 alphabet, in increasing order.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// idLen is the length of an id: 128 bits in 5-bit characters.
const idLen = 26

var ids idSource

// newID returns a fresh id.
func (s *idSource) newID(now time.Time) string {
	ms := uint64(now.UnixMilli()) & (1<<48 - 1)
	s.mu.Lock()
	if ms > s.ms {
		s.ms, s.hi, s.lo = ms, rand.Uint64()&0xffff, rand.Uint64()
	} else {
		// The same millisecond, or a clock that stepped back: keep the last
		// time and count up, carrying into the time part in the (2^-80
		// likely) case that the random part was all ones.
		s.lo++
		if s.lo == 0 {
			s.hi = (s.hi + 1) & 0xffff
			if s.hi == 0 {
				s.ms++
			}
		}
	}
	ms, hi, lo := s.ms, s.hi, s.lo
	s.mu.Unlock()
	return encodeID(ms, hi, lo)
}

// encodeID writes the 128 bits ms(48) hi(16) lo(64) as 26 base32
// characters, most significant first (the first carries 3 bits).
func encodeID(ms, hi, lo uint64) string {
	// top holds the upper 64 bits, lo the lower 64.
	top := ms<<16 | hi
	var b [idLen]byte
	for i := idLen - 1; i >= 0; i-- {
		b[i] = crockford[lo&31]
		lo = lo>>5 | top<<59
		top >>= 5
	}
	return string(b[:])
}
