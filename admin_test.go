package adaptq

import (
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// adminWorker runs a worker with an admin endpoint on loopback and the
// given token ("" for none), and returns its address.
func adminWorker(t *testing.T, token string) string {
	t.Helper()
	yaml := `
admin: {address: "127.0.0.1:0", token: "` + token + `"}
queues: [{url: 'memory://admin-q', handler: 'exec: cat'}]
`
	w, err := New(testConfig(t, yaml), WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	runWorker(t, w)
	return w.AdminAddress()
}

// adminRequest sends method path to addr with the Host header host (addr
// if empty) and the extra headers, and returns the status.
func adminRequest(t *testing.T, addr, method, path, host, body string, headers ...string) int {
	t.Helper()
	if host != "" {
		headers = append(headers, "Host", host)
	}
	resp, _ := adminSend(t, addr, method, path, strings.NewReader(body), headers...)
	return resp.StatusCode
}

func TestAdminRefusesForeignHostsWithoutAToken(t *testing.T) {
	t.Parallel()
	addr := adminWorker(t, "")
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
	addr := adminWorker(t, "s3cret")
	if got := adminRequest(t, addr, "GET", StatsPath, "worker.internal:8089", "", "Authorization", "Bearer s3cret"); got != http.StatusOK {
		t.Errorf("stats with the token and a non-loopback Host: %d", got)
	}
}

func TestAdminRefusesCrossOriginChanges(t *testing.T) {
	t.Parallel()
	addr := adminWorker(t, "")
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
	addr := adminWorker(t, "")
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
