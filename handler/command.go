package handler

import (
	"fmt"
	"strings"
)

// ParseCommand splits a command line into words the way a user writing a
// YAML config expects, without invoking a shell: nothing is expanded, no
// variables, globs, pipes or redirections. The rules are a small subset of
// the POSIX shell's:
//
//   - Unquoted blanks (space, tab, newline, carriage return) separate words.
//   - Single quotes keep everything up to the next single quote literally.
//   - Double quotes keep blanks and single quotes; inside them \" is a
//     double quote and \\ a backslash, and any other backslash is kept as is.
//   - Outside quotes a backslash makes the next character literal.
//   - A backslash before a newline, outside single quotes, joins the lines
//     (both characters are removed), so a long command can be folded in a
//     YAML block scalar.
//   - Quotes join with what is next to them (a'b'"c" is one word, abc),
//     and a pair of quotes with nothing between them is an empty word.
//
// An unterminated quote, a trailing backslash, and a command with no words
// or an empty first word are errors that quote spec. A user who wants a
// shell says so: sh -c 'tr a-z A-Z | tee -a log'.
func ParseCommand(spec string) ([]string, error) {
	fail := func(format string, args ...any) ([]string, error) {
		return nil, fmt.Errorf("handler: command %q: %s", spec, fmt.Sprintf(format, args...))
	}
	var (
		args   []string
		word   strings.Builder
		inWord bool // a word has started, possibly an empty one ('' or "")
	)
	for i := 0; i < len(spec); i++ {
		switch c := spec[i]; c {
		case ' ', '\t', '\n', '\r':
			if inWord {
				args = append(args, word.String())
				word.Reset()
				inWord = false
			}
		case '\\':
			if i+1 == len(spec) {
				return fail("trailing backslash")
			}
			i++
			if spec[i] == '\n' {
				continue // line continuation
			}
			word.WriteByte(spec[i])
			inWord = true
		case '\'':
			end := strings.IndexByte(spec[i+1:], '\'')
			if end < 0 {
				return fail("unterminated single quote at byte %d", i)
			}
			word.WriteString(spec[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case '"':
			open := i
			inWord = true
			for i++; ; i++ {
				if i == len(spec) {
					return fail("unterminated double quote at byte %d", open)
				}
				c := spec[i]
				if c == '"' {
					break
				}
				if c == '\\' && i+1 < len(spec) {
					switch spec[i+1] {
					case '"', '\\':
						i++
						word.WriteByte(spec[i])
						continue
					case '\n':
						i++
						continue
					}
				}
				word.WriteByte(c)
			}
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		args = append(args, word.String())
	}
	switch {
	case len(args) == 0:
		return fail("empty command")
	case args[0] == "":
		return fail("empty command name")
	}
	return args, nil
}
