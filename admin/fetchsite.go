package admin

import (
	"net/http"
	"strings"
)

// refuseCrossSite answers 403 to any request a browser says another site
// made (Sec-Fetch-Site other than same-origin or none), on every route and
// whatever the method, with or without a token, before anything runs. A
// web page could otherwise make its visitors' browsers call the endpoint:
// ten <img> tags pointing at a poison listing cost the worker's backend
// calls on every visit. The header is set by the browser and cannot be
// set by a page's script; programs (curl, Prometheus, KEDA, producers)
// send none and are not affected. An address typed or bookmarked arrives
// as "none", the status page's own requests as "same-origin"; a link from
// another site to the status page is refused too (open it directly).
func refuseCrossSite(next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch site := r.Header.Values("Sec-Fetch-Site"); {
		case len(site) == 0:
		case len(site) == 1 && (strings.EqualFold(site[0], "same-origin") || strings.EqualFold(site[0], "none")):
		default:
			http.Error(rw, "forbidden: a request from another site (Sec-Fetch-Site: "+strings.Join(site, ", ")+"); open the admin endpoint's address directly", http.StatusForbidden)
			return
		}
		next.ServeHTTP(rw, r)
	})
}
