package listener_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
)

// Adversarial review of issue 34's one context per runner and kept batches.

// inlineOnOneRunner makes every batch after the first run inline and never
// spill, so that one runner, with one context, runs them all.
func inlineOnOneRunner(t *testing.T) {
	old := listener.SetSequentialBelow(time.Hour)
	oldStall := listener.SetStallAfter(time.Hour)
	t.Cleanup(func() {
		listener.SetSequentialBelow(old)
		listener.SetStallAfter(oldStall)
	})
}

// A context kept past the return of a handler whose message failed must
// not settle that message's next delivery, which the same runner now runs:
// the kept context's delivery is over, and its receipt is stale. (Each
// delivery's context settled only that delivery before issue 34; one
// context per runner, checking only the id, let the stale one take the
// new delivery's receipt and delete it in its own transaction.)
func TestReviewKeptContextDoesNotSettleARedelivery(t *testing.T) {
	inlineOnOneRunner(t)
	var mu sync.Mutex
	warm := true
	var kept context.Context
	var first *queue.Message
	var strayErr error
	var strayReceipt string
	strayRan := false
	secondReceipt := ""
	h := func(ctx context.Context, m *queue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if warm {
			return nil
		}
		if kept == nil {
			kept, first = ctx, m
			return errors.New("fails the first time")
		}
		// The same message again, on the same runner: the first delivery's
		// handler (a goroutine it left behind) settles now.
		secondReceipt = m.PopReceipt
		strayErr = queue.SettleTx(kept, first, func(r string) error { strayRan, strayReceipt = true, r; return nil })
		return nil
	}
	f := newFixture(t, h, listener.Options{Tasks: 1, RetryDelay: func(*queue.Message, error) time.Duration { return time.Second }})
	f.put(1)
	f.start()
	advanceUntil(t, f, "the first delete", func() bool { return f.l.Stats().Deleted == 1 })
	mu.Lock()
	warm = false
	mu.Unlock()
	f.put(1)
	f.l.Wake()
	advanceUntil(t, f, "the redelivery's delete", func() bool { return f.l.Stats().Deleted == 2 })
	mu.Lock()
	defer mu.Unlock()
	if first.DequeueCount != 1 || secondReceipt == "" {
		t.Fatalf("want a first delivery and a second: %+v, second receipt %q", first, secondReceipt)
	}
	if strayRan || !errors.Is(strayErr, queue.ErrReceiptMismatch) {
		t.Fatalf("the first delivery's kept context settled the second delivery: err %v, delete ran %v with receipt %q (the second's: %q); want ErrReceiptMismatch and no delete",
			strayErr, strayRan, strayReceipt, secondReceipt)
	}
	if s := f.l.Stats(); s.Failed != 1 || s.NotFound != 0 {
		t.Fatalf("stats %+v: want 1 failure, the redelivery deleted by the listener", s)
	}
}

// A settle that a handler began and left to a goroutine of its own ends
// after the runner has moved on to its next message, whose handler is
// settling meanwhile: its end (the first delete failed) must not touch the
// next message's settle, which deleted that message in its transaction.
// Else the listener deletes it again (not found) and counts it so.
func TestReviewStraySettleEndDoesNotTouchTheNextMessage(t *testing.T) {
	inlineOnOneRunner(t)
	var mu sync.Mutex
	warm := true
	aBegun, aRelease, aDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	runs := 0
	var settleErr error
	var f *fixture
	aDoneSeen := make(chan struct{})
	go func() { <-aDone; close(aDoneSeen) }()
	h := func(ctx context.Context, m *queue.Message) error {
		mu.Lock()
		if warm {
			mu.Unlock()
			return nil
		}
		runs++
		n := runs
		mu.Unlock()
		switch n {
		case 1: // A: its settle goes on after it returns, and fails
			go func() {
				aDone <- queue.SettleTx(ctx, m, func(string) error {
					close(aBegun)
					<-aRelease
					return fmt.Errorf("%w: a stray delete", queue.ErrReceiptMismatch)
				})
			}()
			<-aBegun
			return nil
		case 2: // B: deleted in its transaction, while A's settle ends
			err := queue.SettleTx(ctx, m, func(r string) error {
				if err := f.raw.Delete(context.Background(), m.ID, r); err != nil {
					return err
				}
				close(aRelease)
				<-aDoneSeen
				return nil
			})
			mu.Lock()
			settleErr = err
			mu.Unlock()
			return err
		}
		return nil
	}
	f = newFixture(t, h, listener.Options{Tasks: 1})
	f.put(1)
	f.start()
	advanceUntil(t, f, "the first delete", func() bool { return f.l.Stats().Deleted == 1 })
	mu.Lock()
	warm = false
	mu.Unlock()
	f.put(2)
	f.l.Wake()
	advanceUntil(t, f, "both processed", func() bool { return f.l.Stats().Processed == 3 })
	f.settle()
	mu.Lock()
	defer mu.Unlock()
	if settleErr != nil {
		t.Fatalf("B's settle: %v", settleErr)
	}
	if s := f.l.Stats(); s.Deleted != 3 || s.NotFound != 0 || s.Failed != 0 {
		t.Fatalf("stats %+v: want 3 deleted (A by the listener, B in its transaction), none deleted again (NotFound 0)", s)
	}
}
