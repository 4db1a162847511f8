package clock

import (
	"context"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/testutil"
)

func TestFakeFiresInOrder(t *testing.T) {
	f := NewFake(time.Time{})
	t1 := f.NewTimer(3 * time.Second)
	t2 := f.NewTimer(time.Second)
	t3 := f.NewTimer(2 * time.Second)
	if !t3.Stop() {
		t.Fatal("Stop of a pending timer reported false")
	}
	if f.Pending() != 2 {
		t.Fatalf("Pending = %d, want 2", f.Pending())
	}
	f.Advance(500 * time.Millisecond)
	select {
	case <-t2.C():
		t.Fatal("timer fired early")
	default:
	}
	fired := make(chan time.Duration, 1)
	f.AfterFunc(1500*time.Millisecond, func() { fired <- f.Now().Sub(Epoch) })
	f.Advance(10 * time.Second)
	if at := <-t2.C(); at.Sub(Epoch) != time.Second {
		t.Errorf("t2 fired at %s, want 1s", at.Sub(Epoch))
	}
	if at := <-t1.C(); at.Sub(Epoch) != 3*time.Second {
		t.Errorf("t1 fired at %s, want 3s", at.Sub(Epoch))
	}
	if d := <-fired; d < 2*time.Second {
		t.Errorf("AfterFunc ran at %s, want ≥ 2s", d)
	}
	if got := f.Now().Sub(Epoch); got != 10500*time.Millisecond {
		t.Errorf("Now = %s, want 10.5s", got)
	}
	if t3.Stop() {
		t.Error("Stop of a stopped timer reported true")
	}
}

func TestSleepWakes(t *testing.T) {
	f := NewFake(time.Time{})
	wake := make(chan struct{})
	done := make(chan bool)
	go func() { done <- Sleep(context.Background(), f, time.Hour, wake) }()
	if !f.WaitPending(context.Background(), 1) {
		t.Fatal("sleeper never armed its timer")
	}
	close(wake)
	if full := <-done; full {
		t.Fatal("Sleep woken early reported the full sleep")
	}
	go func() { done <- Sleep(context.Background(), f, time.Minute, nil) }()
	f.WaitPending(context.Background(), 1)
	f.Advance(time.Minute)
	if full := <-done; !full {
		t.Fatal("Sleep that ran its course reported an early wake")
	}
}

// Running counts a fired AfterFunc callback until it returns, and
// Unreceived a fired timer until its time is received or it is stopped:
// what a test in virtual time waits for before it moves the clock again.
func TestFakeCountsWorkAMoveSetOff(t *testing.T) {
	f := NewFake(time.Time{})
	release := make(chan struct{})
	f.AfterFunc(time.Second, func() { <-release })
	a, b := f.NewTimer(time.Second), f.NewTimer(time.Second)
	f.Advance(time.Second)
	if r, u := f.Running(), f.Unreceived(); r != 1 || u != 2 {
		t.Fatalf("after the move: Running %d, Unreceived %d; want 1, 2", r, u)
	}
	<-a.C()
	b.Stop()
	if u := f.Unreceived(); u != 0 {
		t.Errorf("one received, one stopped: Unreceived %d, want 0", u)
	}
	close(release)
	// The callback's goroutine returns in real time.
	testutil.Eventually(t, 10*time.Second, "the released callback returns", func() bool { return f.Running() == 0 })
	f.AfterFunc(0, func() {})
	testutil.Eventually(t, 10*time.Second, "a callback due at once returns", func() bool { return f.Running() == 0 })
}
