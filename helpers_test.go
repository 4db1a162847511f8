package adaptq

import (
	"io"
	"net"
	"net/http"
	"testing"
)

func newLocalListener() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// adminSend sends method path to the admin endpoint at addr with body
// (nil for none) and headers given as name, value pairs ("Host" sets the
// request's Host), without following redirects, and returns the response
// and its whole body.
func adminSend(t *testing.T, addr, method, path string, body io.Reader, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" {
			req.Host = headers[i+1]
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// bearer is the header pair that sends token, none when it is empty.
func bearer(token string) []string {
	if token == "" {
		return nil
	}
	return []string{"Authorization", "Bearer " + token}
}
