package clock

import (
	"context"
	"testing"
	"time"
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
