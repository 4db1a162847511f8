package listener_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
)

// A handler's context settles its own message only while the handler runs
// (issue 34: one context now serves every message of a runner, and a task
// reuses its batches). A context kept past the handler's return settles
// nothing: not its old message once done, nor a message another handler
// of the same runner runs now, and that message is deleted as usual.
func TestKeptHandlerContextSettlesNothing(t *testing.T) {
	// Batches after the first run inline, on one runner: its context is
	// the kept one.
	defer listener.SetSequentialBelow(listener.SetSequentialBelow(time.Hour))
	var mu sync.Mutex
	warm := true
	var kept context.Context
	var first *queue.Message
	var strayErr error
	strayDeleted := false
	h := func(ctx context.Context, m *queue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if warm {
			return nil
		}
		if kept == nil {
			kept, first = ctx, m
			return nil
		}
		if strayErr == nil {
			// The first handler has returned; its context tries to settle
			// its message while this one runs.
			strayErr = queue.SettleTx(kept, first, func(string) error { strayDeleted = true; return nil })
			if strayErr == nil {
				strayErr = errors.New("settled")
			}
		}
		return nil
	}
	f := newFixture(t, h, listener.Options{Tasks: 1})
	f.put(1)
	f.start()
	advanceUntil(t, f, "the first delete", func() bool { return f.l.Stats().Deleted == 1 })
	mu.Lock()
	warm = false
	mu.Unlock()
	f.put(3)
	f.l.Wake()
	advanceUntil(t, f, "three more deletes", func() bool { return f.l.Stats().Deleted == 4 })
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the kept context, while another handler ran: %v", strayErr)
	if strayDeleted || strayErr == nil || strayErr.Error() == "settled" {
		t.Fatalf("a context kept past its handler's return settled its message while another ran: %v (delete ran: %v)", strayErr, strayDeleted)
	}
	err := queue.SettleTx(kept, first, func(string) error { strayDeleted = true; return nil })
	if !errors.Is(err, queue.ErrReceiptMismatch) || strayDeleted {
		t.Fatalf("a context kept past its handler's return, after the drain: %v (delete ran: %v); want ErrReceiptMismatch and no delete", err, strayDeleted)
	}
	if s := f.l.Stats(); s.Processed != 4 || s.Failed != 0 {
		t.Fatalf("stats %+v: want 4 processed, none failed", s)
	}
}
