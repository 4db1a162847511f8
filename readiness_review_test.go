package adaptq

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
)

// steppingClock is a fake clock whose reading can step back by offset,
// as a wall clock corrected by NTP does; its timers run on the fake.
type steppingClock struct {
	*clock.Fake
	offset atomic.Int64
}

func (c *steppingClock) Now() time.Time { return c.Fake.Now().Add(time.Duration(c.offset.Load())) }

// The wall clock steps back (an NTP correction) after a successful get,
// then gets fail: the newest get failed, so the queue is not ready, though
// the failure's time is before the success's.
func TestReadyzAfterTheClockStepsBackAndGetsFail(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("stepback")
	sw := newBackendSwitch()
	fake := &steppingClock{Fake: clock.NewFake(time.Time{})}
	w := metricsWorker(t, `
admin: {address: "127.0.0.1:0"}
queues:
  - url: 'memory://`+name+`'
    handler: 'exec: cat'
    idle: {min: 1s, max: 1m, delta: 1s}
`, withClock(fake), withQueueOptions(queue.WithWrapper(sw.wrap)))
	runWorker(t, w)
	addr := w.AdminAddress()
	l, _ := w.Listener(name)
	waitUntil(t, "the first get", func() bool { return !l.Stats().LastGet.IsZero() })
	if code, body := readyz(t, addr); code != http.StatusOK {
		t.Fatalf("idle and healthy: %d %q", code, body)
	}
	fake.offset.Store(int64(-10 * time.Minute))
	sw.down.Store(true)
	errs := l.Stats().GetErrors
	waitUntil(t, "a failed get", func() bool {
		fake.Advance(time.Second)
		return l.Stats().GetErrors > errs
	})
	code, body := readyz(t, addr)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "the last get failed") {
		t.Fatalf("the newest get failed: %d %q, want 503 saying so", code, body)
	}
}
