package queue

import (
	"errors"
	"net/url"
	"regexp"
	"strings"
)

// ParseReason is why url.Parse refused a URL, without the URL itself:
// url.Parse repeats the whole raw URL in its error, password included, and
// a password with a bare % in it (Xy7%of9) is exactly what makes it fail.
// An invalid escape is described, not quoted, since the characters after
// the % are the password's.
func ParseReason(err error) string {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	if _, ok := errors.AsType[url.EscapeError](err); ok {
		return "a % not followed by two hexadecimal digits (write a % in a password or value as %25)"
	}
	if err == nil {
		return "not a URL"
	}
	return err.Error()
}

// urlInText finds URLs in free text, where a client library or a program
// may have quoted a request URL with its signature.
var urlInText = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"'<>\\]+`)

// secretInText finds a secret parameter's value outside a URL ("token=abc",
// "password: hunter2" is not matched: only name=value), and bearer tokens.
var secretInText = regexp.MustCompile(`(?i)(\b(?:` + quoteAll(secretParams) + `)=)[^\s&"'<>;,\\]+|(\bbearer\s+)[A-Za-z0-9._~+/=-]+`)

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = regexp.QuoteMeta(s)
	}
	return strings.Join(q, "|")
}

// RedactText hides the secrets in free text, an error's or a program's
// output: every URL in it goes through Redact (its password and secret
// query values, sig=, token=, password=, key= and the others Redact knows,
// become REDACTED; a URL that does not parse keeps only its scheme), and
// so does a secret parameter's value outside a URL (token=abc) and a
// bearer token. Line breaks are kept. Redacting twice changes nothing.
func RedactText(s string) string {
	if !strings.Contains(s, "://") && !strings.Contains(s, "=") && !strings.Contains(strings.ToLower(s), "bearer") {
		return s
	}
	s = urlInText.ReplaceAllStringFunc(s, redactInText)
	return secretInText.ReplaceAllStringFunc(s, func(m string) string {
		sub := secretInText.FindStringSubmatch(m)
		if sub[1] != "" {
			return sub[1] + "REDACTED"
		}
		return sub[2] + "REDACTED"
	})
}

// redactInText is Redact for a URL found in text, which it leaves as it
// is when it holds no secret (Redact would re-encode it).
func redactInText(raw string) string {
	if strings.HasSuffix(raw, "…") {
		return raw // Redact's own output for a URL it could not parse
	}
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" {
		return Redact(raw)
	}
	if _, ok := u.User.Password(); ok {
		return Redact(raw)
	}
	for k := range u.Query() {
		if isSecretParam(k) {
			return Redact(raw)
		}
	}
	return raw
}

// RedactError is err with its text passed through RedactText; errors.Is and
// errors.As still reach err and everything it wraps. RedactError(nil) is
// nil, and an error it returned is returned as it is.
func RedactError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*redactedError); ok {
		return err
	}
	return &redactedError{err: err, text: RedactText(err.Error())}
}

type redactedError struct {
	err  error
	text string
}

func (e *redactedError) Error() string { return e.text }
func (e *redactedError) Unwrap() error { return e.err }
