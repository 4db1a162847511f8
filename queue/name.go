package queue

import "fmt"

// Queue name limits: Azure Queue Storage's naming rules, applied on every
// driver so that a configuration moves between backends unchanged.
const (
	MinNameLength = 3
	MaxNameLength = 63
)

// ValidateName checks a queue name against Azure's rules: 3 to 63
// characters; lowercase letters, digits and hyphens; starting and ending
// with a letter or digit; no two hyphens in a row. The error wraps
// ErrInvalidName and says what is wrong with which name.
func ValidateName(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidName, name, why)
	}
	if len(name) < MinNameLength || len(name) > MaxNameLength {
		return bad(fmt.Sprintf("length %d is outside %d..%d", len(name), MinNameLength, MaxNameLength))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-':
			if i == 0 || i == len(name)-1 {
				return bad("must start and end with a letter or digit")
			}
			if name[i-1] == '-' {
				return bad("has consecutive hyphens")
			}
		case c >= 'A' && c <= 'Z':
			return bad("has an uppercase letter (names are lowercase)")
		default:
			return bad(fmt.Sprintf("has the character %q (allowed: a-z, 0-9, -)", c))
		}
	}
	return nil
}
