//go:build unix

package azuritetest_test

import (
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/adaptq/adaptq/queue/azure/azuritetest"
)

// Without node_modules the helper fails, saying how to install Azurite;
// it never skips.
func TestMissingInstallFails(t *testing.T) {
	t.Setenv(azuritetest.EnvDir, t.TempDir())
	_, err := azuritetest.Launch()
	if err == nil || !strings.Contains(err.Error(), "make test") {
		t.Fatalf("Launch without Azurite installed: %v, want an error telling to run make test", err)
	}
}

// A server answers on its loopback ports, and Stop ends its processes.
func TestStartStop(t *testing.T) {
	s, err := azuritetest.Launch()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	for _, addr := range []string{s.QueueAddr, s.BlobAddr} {
		if !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Errorf("listens on %s, want the loopback", addr)
		}
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			t.Fatalf("%s does not answer: %v", addr, err)
		}
		resp.Body.Close()
	}
	pids := s.PIDs()
	s.Stop()
	s.Stop() // twice is harmless
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("process %d still runs after Stop", pid)
		}
	}
	if _, err := http.Get("http://" + s.QueueAddr + "/"); err == nil {
		t.Error("the queue service still answers after Stop")
	}
}
