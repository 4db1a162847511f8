package adaptq

import (
	"fmt"
	"strings"
	"testing"
)

// TestYAMLErrorNamesTheLine: a YAML syntax error names the line of the
// mistake. The parser named the line where the enclosing block started,
// counted from 0: line 1 for a mistake on line 4 of a mapping that starts
// on line 2.
func TestYAMLErrorNamesTheLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml string
		line       int
	}{
		{"indentation in a mapping", "log:\n  level: info\n  format: json\n level: debug\nqueues: [{url: 'memory://a1b'}]\n", 4},
		{"indentation in a list", "log: {level: info}\nadmin: {address: ''}\nqueues:\n  - url: memory://a1b\n   handler: \"exec: cat\"\n", 5},
		{"a tab", "log: {level: info}\nadmin: {address: ''}\nqueues:\n\t- url: memory://a1b\n", 4},
		{"unclosed quote", "log: {level: info}\nadmin: {address: ''}\nqueues:\n  - url: \"memory://a1b\n", 4},
		{"colon in a value", "log: {level: info}\nqueues:\n  - url: memory://a1b\n    handler: exec: cat\n", 4},
		{"unclosed flow list", "log:\n  level: info\nqueues:\n  - url: memory://a1b\n    batch_size: [1\n", 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseConfig("bad.yaml", []byte(tc.yaml), nil)
			if err == nil {
				t.Fatal("parsed")
			}
			want := fmt.Sprintf("not valid YAML: line %d: ", tc.line)
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		})
	}
}
