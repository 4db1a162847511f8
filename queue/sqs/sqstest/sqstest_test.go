//go:build unix

package sqstest_test

import (
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/adaptq/adaptq/queue/sqs/sqstest"
)

// Without node_modules the helper fails, saying how to install fauxqs; it
// never skips.
func TestMissingInstallFails(t *testing.T) {
	t.Setenv(sqstest.EnvDir, t.TempDir())
	_, err := sqstest.Launch()
	if err == nil || !strings.Contains(err.Error(), "make test") {
		t.Fatalf("Launch without fauxqs installed: %v, want an error telling to run make test", err)
	}
}

// A server answers on the loopback only, and Stop ends its process.
func TestStartStop(t *testing.T) {
	s, err := sqstest.Launch()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if !strings.HasPrefix(s.Addr, "127.0.0.1:") {
		t.Errorf("listens on %s, want the loopback", s.Addr)
	}
	resp, err := http.Get(s.Endpoint + "/health")
	if err != nil {
		t.Fatalf("%s does not answer: %v", s.Addr, err)
	}
	resp.Body.Close()
	if a, b := sqstest.NewRegion(), sqstest.NewRegion(); a == b {
		t.Errorf("NewRegion returned %q twice", a)
	}
	pid := s.PID()
	s.Stop()
	s.Stop() // twice is harmless
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("process %d still runs after Stop", pid)
	}
	if _, err := http.Get(s.Endpoint + "/health"); err == nil {
		t.Error("the server still answers after Stop")
	}
}
