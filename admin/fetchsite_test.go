package admin

import (
	"net/http"
	"strings"
	"testing"

	"github.com/adaptq/adaptq/internal/testutil"
)

// A browser tells the endpoint where a request comes from in
// Sec-Fetch-Site. A page on another site (an <img> pointing at the poison
// listing, a link, a fetch) must get a 403 from every route, with or
// without a token, before the route runs: it would otherwise make the
// worker call its backend for the page's visitor. The operator's own tab
// (same-origin), an address typed or bookmarked (none) and programs that
// send no such header are served.
func TestAdminRefusesCrossSiteRequestsOnEveryRoute(t *testing.T) {
	t.Parallel()
	for _, token := range []string{"", "c0d9e8f7a6b5c4d3e2f1a0b9"} {
		addr := startAdmin(t, token)
		auth := testutil.Bearer(token)
		routes := []string{
			HealthPath, ReadyPath, MetricsPath, StatsPath, ScalingPath, "/",
			strings.Replace(PoisonPath, "{name}", fakeQueue, 1) + "?limit=10",
			strings.Replace(PoisonMessagePath, "{name}", fakeQueue, 1),
		}
		for _, path := range routes {
			path = strings.Replace(path, "{id}", "some-id", 1)
			for _, site := range []string{"cross-site", "same-site", "Cross-Site"} {
				if got := adminRequest(t, addr, "GET", path, "", "", append([]string{"Sec-Fetch-Site", site}, auth...)...); got != http.StatusForbidden {
					t.Errorf("token %q: GET %s with Sec-Fetch-Site %s: %d, want 403", token, path, site, got)
				}
			}
			for _, site := range []string{"same-origin", "none", ""} {
				h := auth
				if site != "" {
					h = append([]string{"Sec-Fetch-Site", site}, auth...)
				}
				if got := adminRequest(t, addr, "GET", path, "", "", h...); got == http.StatusForbidden {
					t.Errorf("token %q: GET %s with Sec-Fetch-Site %q: 403, want it served", token, path, site)
				}
			}
		}
		trigger := strings.Replace(TriggerPath, "{name}", fakeQueue, 1)
		if got := adminRequest(t, addr, "POST", trigger, "", "", append([]string{"Sec-Fetch-Site", "same-site"}, auth...)...); got != http.StatusForbidden {
			t.Errorf("token %q: POST %s from the same site: %d, want 403", token, trigger, got)
		}
	}
}
