package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
)

// Inspect shows hidden messages with when they become visible, leaves out
// expired ones, and changes nothing: a get afterwards sees what it would
// have seen.
func TestInspectShowsHiddenMessagesAndChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := clock.NewFake(clock.Epoch)
	s := memory.NewStore(memory.WithClock(c))
	q, err := s.Queue("work")
	if err != nil {
		t.Fatal(err)
	}
	short, _ := q.Put(ctx, []byte("short"), queue.PutOptions{TTL: time.Minute})
	held, _ := q.Put(ctx, []byte("held"), queue.PutOptions{})
	later, _ := q.Put(ctx, []byte("later"), queue.PutOptions{InitialVisibilityDelay: time.Hour})
	got, err := q.Get(ctx, 1, time.Minute) // the oldest visible: short
	if err != nil || len(got) != 1 || got[0].ID != short {
		t.Fatalf("get: %v %v", got, err)
	}
	c.Advance(2 * time.Minute) // short expires; held stays visible
	ms := s.Inspect("work")
	if len(ms) != 2 || ms[0].ID != held || ms[1].ID != later {
		t.Fatalf("Inspect = %+v, want held and later, in put order", ms)
	}
	if want := clock.Epoch.Add(time.Hour); !ms[1].NextVisibleAt.Equal(want) || ms[1].DequeueCount != 0 || ms[1].PopReceipt != "" {
		t.Errorf("later: %+v, want hidden until %v, never got, no receipt", ms[1], want)
	}
	if s.Inspect("nosuch") != nil {
		t.Error("a queue the store does not hold has messages")
	}
	if got, _ := q.Get(ctx, 32, time.Minute); len(got) != 1 || got[0].ID != held || got[0].DequeueCount != 1 {
		t.Fatalf("get after Inspect: %+v, want held, first delivery", got)
	}
}
