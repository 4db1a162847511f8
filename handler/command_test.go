package handler_test

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/adaptq/adaptq/handler"
)

func TestParseCommand(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec string
		want []string
	}{
		{`python3 worker.py`, []string{"python3", "worker.py"}},
		{"  a \t b\n c\r\n", []string{"a", "b", "c"}},
		{`echo 'hello  world'`, []string{"echo", "hello  world"}},
		{`echo 'a "b" \c $d'`, []string{"echo", `a "b" \c $d`}},
		{`echo "hello  world"`, []string{"echo", "hello  world"}},
		{`echo "say \"hi\""`, []string{"echo", `say "hi"`}},
		{`echo "back\\slash"`, []string{"echo", `back\slash`}},
		{`echo "keep \n and \$x"`, []string{"echo", `keep \n and \$x`}},
		{`echo "it's"`, []string{"echo", "it's"}},
		{`echo a\ b`, []string{"echo", "a b"}},
		{`echo \'x\' \"y\" \\z`, []string{"echo", "'x'", `"y"`, `\z`}},
		{`a'b'"c"d`, []string{"abcd"}},
		{`cmd '' ""`, []string{"cmd", "", ""}},
		{"cmd --flag=1 \\\n  --other=2", []string{"cmd", "--flag=1", "--other=2"}},
		{"cmd a\\\nb", []string{"cmd", "ab"}},
		{"cmd \"a\\\nb\"", []string{"cmd", "ab"}},
		{"cmd 'a\\\nb'", []string{"cmd", "a\\\nb"}},
		{"cmd 'multi\nline'", []string{"cmd", "multi\nline"}},
		{`sh -c 'tr a-z A-Z | tee -a log'`, []string{"sh", "-c", "tr a-z A-Z | tee -a log"}},
		{`ünï "cödé ✓"`, []string{"ünï", "cödé ✓"}},
		{`$HOME *.go ~`, []string{"$HOME", "*.go", "~"}}, // nothing is expanded
	}
	for _, tt := range tests {
		got, err := handler.ParseCommand(tt.spec)
		if err != nil {
			t.Errorf("ParseCommand(%q): %v", tt.spec, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseCommand(%q) = %q, want %q", tt.spec, got, tt.want)
		}
	}
}

func TestParseCommandErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec string
		why  string
	}{
		{``, "empty command"},
		{" \t\n", "empty command"},
		{`'' arg`, "empty command name"},
		{`echo 'oops`, "unterminated single quote at byte 5"},
		{`echo "oops`, "unterminated double quote at byte 5"},
		{`echo "oops\"`, "unterminated double quote at byte 5"},
		{`echo oops\`, "trailing backslash"},
		{`echo "a" 'b`, "unterminated single quote at byte 9"},
	}
	for _, tt := range tests {
		got, err := handler.ParseCommand(tt.spec)
		if err == nil {
			t.Errorf("ParseCommand(%q) = %q, want an error", tt.spec, got)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, tt.why) {
			t.Errorf("ParseCommand(%q) error %q does not say %q", tt.spec, msg, tt.why)
		}
		if !strings.Contains(msg, strconv.Quote(tt.spec)) {
			t.Errorf("ParseCommand(%q) error %q does not quote the spec", tt.spec, msg)
		}
	}
}
