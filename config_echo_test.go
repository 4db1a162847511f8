package adaptq

import (
	"strings"
	"testing"
)

// A token written one level off (admin: "TOKEN" instead of admin: {token:
// TOKEN}), or unquoted so that YAML reads a number, is named by its kind
// in the error, never echoed; the field is still named.
func TestConfigErrorsNeverEchoAValueWrittenAtTheWrongLevel(t *testing.T) {
	t.Parallel()
	const good = "\nqueues: [{url: 'memory://a1b'}]"
	for _, tc := range []struct{ yaml, field, secret string }{
		{`admin: "s3cr3t-T0ken-value"` + good, "admin:", "s3cr3t-T0ken-value"},
		{`admin: {token: 8675309123}` + good, "admin.token:", "8675309123"},
		{`log: "s3cr3t-T0ken-value"` + good, "log:", "s3cr3t-T0ken-value"},
		{`queues: "memory://u:s3cr3t-T0ken-value@x"`, "queues:", "s3cr3t-T0ken-value"},
	} {
		_, err := parseConfig("s.yaml", []byte(tc.yaml), nil)
		if err == nil {
			t.Fatalf("%s: want an error", tc.yaml)
		}
		if strings.Contains(err.Error(), tc.secret) {
			t.Errorf("%s: the error echoes the value: %v", tc.yaml, err)
		}
		if !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: the error does not name %s: %v", tc.yaml, tc.field, err)
		}
	}
}
