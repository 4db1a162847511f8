package admin

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/internal/clock"
)

// MinTokenLength is the shortest admin token the endpoint accepts: 16
// characters. A token is a bearer credential like a session id, and
// OWASP's Session Management Cheat Sheet asks 64 bits of entropy of one:
// 16 hexadecimal characters carry 64 bits. Make one with
// `openssl rand -hex 32` (64 characters, 256 bits).
const MinTokenLength = 16

// ErrWeakToken is what CheckToken's errors match: the token is short, a
// placeholder, or not random.
var ErrWeakToken = errors.New("weak admin token")

// placeholderWords are what a token made by hand, or left from an example,
// is made of. A random token contains none of them but by a chance under
// one in a hundred thousand.
var placeholderWords = []string{"changeme", "replaceme", "placeholder", "password", "passwd", "secret", "token", "example", "default", "letmein", "qwerty", "123456"}

// minDistinct is the fewest different characters a token of
// MinTokenLength must have: 16 random hexadecimal characters have fewer
// than 5 with a chance of 4 in ten million.
const minDistinct = 5

// CheckToken refuses an admin token that anyone could guess: shorter than
// MinTokenLength, with whitespace or control characters (an HTTP header
// cannot carry them reliably; a token of spaces is no token), made of a
// placeholder word (change-me, secret, …), of too few different characters,
// or of a shorter string repeated. Its errors name the rule, never the
// token, and match ErrWeakToken. Start calls it for Options.Token, and the
// worker's config for admin.token.
func CheckToken(token string) error {
	weak := func(format string, args ...any) error {
		return fmt.Errorf("admin.token: %w: %s; make one with `openssl rand -hex 32`", ErrWeakToken, fmt.Sprintf(format, args...))
	}
	if !utf8.ValidString(token) {
		return weak("it is not valid UTF-8")
	}
	if strings.IndexFunc(token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return weak("it contains whitespace or a control character (a header cannot carry them reliably)")
	}
	n := utf8.RuneCountInString(token)
	if n < MinTokenLength {
		return weak("its length is %d, below the minimum of %d characters (admin.MinTokenLength)", n, MinTokenLength)
	}
	norm := strings.Map(func(r rune) rune {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			return unicode.ToLower(r)
		}
		return -1
	}, token)
	for _, w := range placeholderWords {
		if strings.Contains(norm, w) {
			return weak("it contains the word %q: a placeholder or a guessable word, not a random token", w)
		}
	}
	runes := []rune(token)
	distinct := map[rune]bool{}
	for _, r := range runes {
		distinct[r] = true
	}
	if len(distinct) < minDistinct {
		return weak("it uses only %d different characters (the minimum is %d): not random", len(distinct), minDistinct)
	}
	for p := 1; p <= len(runes)/2; p++ {
		if slices.Equal(runes[p:], runes[:len(runes)-p]) {
			return weak("it repeats a string of %d characters: not random", p)
		}
	}
	return nil
}

// The throttle of failed credentials, per client address: a client may
// present AuthFailureBurst wrong tokens (bearer or login form) at once,
// then one more each AuthFailureRefill; beyond that it gets 429 with
// Retry-After, whatever it sends, until a slot has refilled. An operator
// who mistypes the token a few times is never slowed; a guesser gets 10 a
// minute, at which half the tokens of MinTokenLength hexadecimal
// characters take over 10^12 years to try.
const (
	AuthFailureBurst  = 10
	AuthFailureRefill = 6 * time.Second
)

// maxThrottledClients bounds the throttle's memory: one bucket per address
// (an IPv6 client's /64, which one host usually owns whole), at most this
// many; clients beyond it, when no bucket is full to forget, share one
// bucket, so that many addresses do not buy many guesses.
const maxThrottledClients = 4096

// maxTrustedClients bounds the addresses the throttle remembers as having
// presented the right token (the oldest forgotten first): they get a
// bucket of their own even when strangers' addresses fill the table, so a
// guesser with thousands of addresses cannot push the operator, Prometheus
// or KEDA into the overflow bucket it drains. A guesser cannot join them
// without the token.
const maxTrustedClients = 256

// AuthFailureLogInterval is how often the log summarises wrong tokens: the
// first after a quiet interval is logged at once (with its address), the
// rest of the interval in one line (how many, how many were throttled,
// from which addresses), so a guesser cannot fill the log.
const AuthFailureLogInterval = time.Minute

// maxLoggedAddresses bounds the addresses one summary line names.
const maxLoggedAddresses = 10

// bucket is one client's token bucket: tokens left, as of last.
type bucket struct {
	tokens float64
	last   time.Time
}

// authThrottle is the failed-credential throttle and its log summary.
type authThrottle struct {
	clock clock.Clock
	log   *zap.Logger

	mu       sync.Mutex
	buckets  map[netip.Prefix]*bucket
	overflow bucket
	// trusted are the clients that presented the right token, with when
	// they last did (at most maxTrustedClients).
	trusted map[netip.Prefix]time.Time

	// the summary of the current interval
	timer   clock.Timer // nil: no failure since the last summary
	wrong   int
	refused int
	addrs   []string
	more    int
	stopped bool
}

func newAuthThrottle(c clock.Clock, log *zap.Logger) *authThrottle {
	return &authThrottle{clock: c, log: log, buckets: map[netip.Prefix]*bucket{}, trusted: map[netip.Prefix]time.Time{}}
}

// clientKey is the bucket a request's client address falls in: its IPv4
// address, or its IPv6 /64.
func clientKey(r *http.Request) netip.Prefix {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Prefix{}
	}
	a := ap.Addr().Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

// bucketLocked is the bucket of key, refilled to now.
func (t *authThrottle) bucketLocked(key netip.Prefix, now time.Time) *bucket {
	b, ok := t.buckets[key]
	if !ok {
		if len(t.buckets) >= maxThrottledClients {
			for k, old := range t.buckets {
				if refill(old, now); old.tokens >= AuthFailureBurst {
					delete(t.buckets, k)
				}
			}
		}
		if _, trusted := t.trusted[key]; len(t.buckets) >= maxThrottledClients && !trusted {
			b = &t.overflow
			if b.last.IsZero() {
				b.tokens, b.last = AuthFailureBurst, now
			}
		} else {
			b = &bucket{tokens: AuthFailureBurst, last: now}
			t.buckets[key] = b
		}
	}
	refill(b, now)
	return b
}

func refill(b *bucket, now time.Time) {
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(AuthFailureBurst, b.tokens+float64(d)/float64(AuthFailureRefill))
		b.last = now
	}
}

// take spends one attempt of r's client before its credential is checked
// (so that concurrent guesses cannot overrun the bucket). If the client
// has none left it answers 429 with Retry-After and reports false; a
// credential that turns out right gives the attempt back (refund).
func (t *authThrottle) take(rw http.ResponseWriter, r *http.Request) bool {
	now := t.clock.Now()
	t.mu.Lock()
	b := t.bucketLocked(clientKey(r), now)
	if b.tokens >= 1 {
		b.tokens--
		t.mu.Unlock()
		return true
	}
	wait := time.Duration((1 - b.tokens) * float64(AuthFailureRefill))
	t.noteLocked(r, true)
	t.mu.Unlock()
	secs := max(1, int(math.Ceil(wait.Seconds())))
	rw.Header().Set("Retry-After", strconv.Itoa(secs))
	http.Error(rw, fmt.Sprintf("too many wrong tokens from your address: retry after %d s", secs), http.StatusTooManyRequests)
	return false
}

// refund gives back the attempt take spent: the credential was right.
func (t *authThrottle) refund(r *http.Request) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	// Trusted first, so that a client take put in the overflow bucket gets
	// its own and the attempt is not given back to the shared one.
	key := clientKey(r)
	if key.IsValid() {
		t.trusted[key] = now
	}
	b := t.bucketLocked(key, now)
	b.tokens = min(AuthFailureBurst, b.tokens+1)
	if len(t.trusted) > maxTrustedClients {
		var oldest netip.Prefix
		var at time.Time
		for k, v := range t.trusted {
			if !oldest.IsValid() || v.Before(at) {
				oldest, at = k, v
			}
		}
		delete(t.trusted, oldest)
	}
}

// failed logs a wrong credential (the attempt is spent).
func (t *authThrottle) failed(r *http.Request) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.noteLocked(r, false)
}

// noteLocked counts a wrong or throttled attempt towards the log: the
// first after a quiet interval is a line of its own, the rest wait for the
// interval's summary.
func (t *authThrottle) noteLocked(r *http.Request, throttled bool) {
	if t.stopped {
		return
	}
	addr := r.RemoteAddr
	if k := clientKey(r); k.IsValid() {
		addr = k.Addr().String()
	}
	if t.timer == nil {
		t.log.Warn("adaptq: admin endpoint: a wrong token (further ones are summarised once a minute)",
			zap.String("remote", addr), zap.String("path", r.URL.Path), zap.Bool("throttled", throttled))
		t.timer = t.clock.AfterFunc(AuthFailureLogInterval, t.summary)
		return
	}
	if throttled {
		t.refused++
	} else {
		t.wrong++
	}
	switch {
	case slices.Contains(t.addrs, addr):
	case len(t.addrs) < maxLoggedAddresses:
		t.addrs = append(t.addrs, addr)
	default:
		t.more++
	}
}

// summary logs the interval's wrong tokens, if any, and starts the next
// interval; after a quiet one it stops until the next wrong token.
func (t *authThrottle) summary() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	if t.wrong+t.refused == 0 {
		t.timer = nil
		return
	}
	t.log.Warn("adaptq: admin endpoint: wrong tokens in the last interval",
		zap.Duration("interval", AuthFailureLogInterval), zap.Int("wrong", t.wrong), zap.Int("throttled", t.refused),
		zap.Strings("remotes", t.addrs), zap.Int("more_remotes", t.more))
	t.wrong, t.refused, t.addrs, t.more = 0, 0, nil, 0
	t.timer = t.clock.AfterFunc(AuthFailureLogInterval, t.summary)
}

// stop ends the summaries (the endpoint stopped); what the interval
// counted so far is logged.
func (t *authThrottle) stop() {
	t.summary()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
}
