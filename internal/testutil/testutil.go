// Package testutil holds the few helpers adaptq's tests share across
// packages.
package testutil

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// SyncBuffer is a bytes.Buffer safe for concurrent use: output that a test
// reads while handlers, loggers or child processes may still write.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// Sync does nothing; it lets a SyncBuffer serve as a zap sink.
func (s *SyncBuffer) Sync() error { return nil }

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Eventually polls cond until it holds, and fails the test naming what it
// waited for if timeout passes first. It never asserts on how long that
// took: the wait only bounds a test that would otherwise hang.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", timeout, what)
		}
		time.Sleep(200 * time.Microsecond)
	}
}
