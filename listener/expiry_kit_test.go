package listener_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/adaptqtest"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
)

// A message that keeps failing as its expiry nears used to be cut to a
// third of what it had left, again and again: about 24 runs in its last
// minute, at intervals shrinking by a third, down to under a millisecond,
// until a hide ended while the task slept idle.min and the message expired
// without reaching the poison queue. Once what is left is too short for a
// retry of at least listener.MinRetryHide, it is poisoned (rule expiring)
// instead. The test runs in the kit's virtual time.
func TestMessageFailingNearItsExpiryIsPoisonedNotRetriedInAShrinkingSeries(t *testing.T) {
	downstream := errors.New("downstream unavailable")
	h := func(context.Context, *queue.Message) error { return downstream }
	// Retries bounded by the message's life, not by its dequeue count.
	k, err := adaptqtest.NewListener("orders", h, listener.Options{MaxDequeueCount: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	q, err := k.Queue("orders")
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 3 * time.Minute
	id, err := q.Put(context.Background(), []byte("order 7"), queue.PutOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	expiry := k.Now().Add(ttl)
	if err := k.Settle(); err != nil {
		t.Fatal(err)
	}
	m := k.Message(id)
	lastMinute := 0
	var shortest time.Duration = -1
	for i, r := range m.Runs {
		if expiry.Sub(r.At) <= time.Minute {
			lastMinute++
		}
		if i > 0 {
			if d := r.At.Sub(m.Runs[i-1].At); shortest < 0 || d < shortest {
				shortest = d
			}
		}
	}
	t.Logf("%v; %d runs in its last minute, shortest interval %s", m, lastMinute, shortest)
	if !k.RequirePoisoned(t, id, poison.RuleExpiring) {
		t.Errorf("%d runs in the message's last minute, the shortest %s after the one before", lastMinute, shortest)
	}
	if shortest < listener.MinRetryHide {
		t.Errorf("a retry came %s after the run before, below the %s floor: the message was retried in a shrinking series", shortest, listener.MinRetryHide)
	}
	if m.State == adaptqtest.Poisoned && (!strings.Contains(m.Reason, downstream.Error()) || !strings.Contains(m.Reason, "expires in")) {
		t.Errorf("poison reason %q: want the handler's error and why", m.Reason)
	}
}
