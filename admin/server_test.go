package admin

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/adaptq/adaptq/internal/testutil"
)

var adminRequest = testutil.Request

func TestAdminRefusesForeignHostsWithoutAToken(t *testing.T) {
	t.Parallel()
	addr := startAdmin(t, "")
	_, port, _ := strings.Cut(addr, ":")
	for _, tc := range []struct {
		host string
		want int
	}{
		{"attacker.example", http.StatusForbidden}, // DNS rebinding
		{"attacker.example:" + port, http.StatusForbidden},
		{"10.0.0.1:" + port, http.StatusForbidden},
		{addr, http.StatusOK},
		{"localhost:" + port, http.StatusOK},
		{"localhost", http.StatusOK},
		{"[::1]:" + port, http.StatusOK},
	} {
		if got := adminRequest(t, addr, "GET", StatsPath, tc.host, ""); got != tc.want {
			t.Errorf("GET %s with Host %q: %d, want %d", StatsPath, tc.host, got, tc.want)
		}
	}
	// The health check answers probes that name the machine's address.
	if got := adminRequest(t, addr, "GET", HealthPath, "10.0.0.1:"+port, ""); got != http.StatusOK {
		t.Errorf("health check with a foreign Host: %d", got)
	}
}

func TestAdminWithATokenAcceptsAnyHost(t *testing.T) {
	t.Parallel()
	addr := startAdmin(t, "s3cr-Kv9q-Wx2m-Lp7")
	if got := adminRequest(t, addr, "GET", StatsPath, "worker.internal:8089", "", "Authorization", "Bearer s3cr-Kv9q-Wx2m-Lp7"); got != http.StatusOK {
		t.Errorf("stats with the token and a non-loopback Host: %d", got)
	}
}

func TestAdminRefusesCrossOriginChanges(t *testing.T) {
	t.Parallel()
	addr := startAdmin(t, "")
	trigger := strings.Replace(TriggerPath, "{name}", "admin-q", 1)
	for _, tc := range []struct {
		name    string
		headers []string
		want    int
	}{
		{"cross-origin form post", []string{"Origin", "http://attacker.example", "Content-Type", "text/plain"}, http.StatusForbidden},
		{"cross-site fetch", []string{"Sec-Fetch-Site", "cross-site", "Content-Type", "text/plain"}, http.StatusForbidden},
		{"origin null", []string{"Origin", "null"}, http.StatusForbidden},
		{"same origin", []string{"Origin", "http://" + addr}, http.StatusAccepted},
		{"no browser headers (a producer)", nil, http.StatusAccepted},
	} {
		if got := adminRequest(t, addr, "POST", trigger, "", "x", tc.headers...); got != tc.want {
			t.Errorf("%s: POST %s: %d, want %d", tc.name, trigger, got, tc.want)
		}
	}
}

func TestAdminLimitsBodiesAndSetsTimeouts(t *testing.T) {
	t.Parallel()
	addr := startAdmin(t, "")
	trigger := strings.Replace(TriggerPath, "{name}", "admin-q", 1)
	big := strings.Repeat("x", adminMaxBody+1)
	if got := adminRequest(t, addr, "POST", trigger, "", big); got != http.StatusRequestEntityTooLarge {
		t.Errorf("POST with a %d-byte body: %d, want 413", len(big), got)
	}
	srv := newAdminHTTPServer(http.NewServeMux())
	if srv.ReadTimeout <= 0 || srv.ReadHeaderTimeout <= 0 || srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 || srv.MaxHeaderBytes <= 0 {
		t.Fatalf("admin server without a bound: read %s, read header %s, write %s, idle %s, max header %d",
			srv.ReadTimeout, srv.ReadHeaderTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
	}
}

// /metrics needs the token when one is set (Prometheus sends it as a
// bearer token); the probes need neither the token nor a local Host.
func TestMetricsAndProbesAccess(t *testing.T) {
	t.Parallel()
	for _, token := range []string{"", "s3cr-Kv9q-Wx2m-Lp7"} {
		addr := startAdmin(t, token)
		_, port, _ := strings.Cut(addr, ":")
		foreign := "10.0.0.1:" + port
		for _, tc := range []struct {
			path, host string
			headers    []string
			want       int
		}{
			{ReadyPath, foreign, nil, http.StatusOK},
			{HealthPath, foreign, nil, http.StatusOK},
			{MetricsPath, "", []string{"Authorization", "Bearer " + token}, http.StatusOK},
		} {
			if got := adminRequest(t, addr, "GET", tc.path, tc.host, "", tc.headers...); got != tc.want {
				t.Errorf("token %q: GET %s (Host %q): %d, want %d", token, tc.path, tc.host, got, tc.want)
			}
		}
		if token == "" {
			if got := adminRequest(t, addr, "GET", MetricsPath, foreign, ""); got != http.StatusForbidden {
				t.Errorf("no token: GET %s from a foreign Host: %d, want 403", MetricsPath, got)
			}
		} else {
			if got := adminRequest(t, addr, "GET", MetricsPath, "", ""); got != http.StatusUnauthorized {
				t.Errorf("token set: GET %s without it: %d, want 401", MetricsPath, got)
			}
		}
		if got := adminRequest(t, addr, "POST", MetricsPath, "", "", "Authorization", "Bearer "+token); got != http.StatusMethodNotAllowed {
			t.Errorf("POST %s: %d, want 405", MetricsPath, got)
		}
	}
}

// Start refuses an address other hosts can reach without a token, as the
// worker's config does (admin.address needs admin.token).
func TestStartNeedsATokenOffLoopback(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:0"} {
		s, err := Start(newFakeWorker(t), Options{Address: addr})
		if err == nil {
			s.Stop()
			t.Errorf("Start(%q) without a token served", addr)
			continue
		}
		if !strings.Contains(err.Error(), "token") || !strings.Contains(err.Error(), addr) {
			t.Errorf("Start(%q): %v: want the address and the token named", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0"} {
		s, err := Start(newFakeWorker(t), Options{Address: addr})
		if err != nil {
			if addr == "[::1]:0" {
				continue // a machine without IPv6 loopback
			}
			t.Fatalf("Start(%q): %v", addr, err)
		}
		s.Stop()
	}
}

// TestDepthErrorRedacted: a depth error that quotes a secret (a backend's
// URL with its password, a SAS signature) is served by /v1/stats and
// /v1/scaling with the secret hidden, as the scaler serves it.
func TestDepthErrorRedacted(t *testing.T) {
	w := newFakeWorker(t)
	w.depthErr = `count: dial redis://:hunter2pw@10.0.0.1:6379: refused; GET https://a.queue.core.windows.net/q?sig=s3cr3tSIG&se=1`
	s, err := Start(w, Options{Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	for _, path := range []string{StatsPath, ScalingPath} {
		resp, err := http.Get("http://" + s.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, secret := range []string{"hunter2pw", "s3cr3tSIG"} {
			if strings.Contains(string(body), secret) {
				t.Errorf("GET %s shows the secret %q:\n%s", path, secret, body)
			}
		}
		if !strings.Contains(string(body), "depth_error") {
			t.Errorf("GET %s has no depth_error:\n%s", path, body)
		}
	}
}
