//go:build unix

package sqstest_test

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

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

// A server started with ClockControl moves its clock, and its answers'
// Date, by the offset set; one without refuses.
func TestClockOffset(t *testing.T) {
	s := sqstest.StartWith(t, sqstest.Options{ClockControl: true})
	serverDate := func() time.Time {
		t.Helper()
		resp, err := http.Get(s.Endpoint + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		d, err := http.ParseTime(resp.Header.Get("Date"))
		if err != nil {
			t.Fatalf("Date %q: %v", resp.Header.Get("Date"), err)
		}
		return d
	}
	if err := s.SetClockOffset(-time.Hour); err != nil {
		t.Fatal(err)
	}
	if d := serverDate(); !d.Before(time.Now().Add(-50 * time.Minute)) {
		t.Errorf("with the clock an hour behind the server's Date is %s (now %s)", d, time.Now().UTC())
	}
	if err := s.SetClockOffset(0); err != nil {
		t.Fatal(err)
	}
	if d := serverDate(); d.Before(time.Now().Add(-50 * time.Minute)) {
		t.Errorf("with the offset undone the server's Date is %s (now %s)", d, time.Now().UTC())
	}
	if err := sqstest.Start(t).SetClockOffset(time.Minute); err == nil {
		t.Error("a server started without ClockControl let its clock be moved")
	}
}
