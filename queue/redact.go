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
// may have quoted a request URL with its password or signature.
var urlInText = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"'<>\\]+`)

// The kinds of name after which RedactText hides a value.
const (
	// nameStrong always holds a secret: its value is hidden after "=",
	// ":" (YAML, JSON, a header) or a percent-encoded "=" (%3D), with an
	// optional quote around the name (JSON, a Python dict) and spaces
	// before and after the separator. Any name that ends in one counts
	// (client_secret, AWS_SECRET_ACCESS_KEY, ADAPTQ_ADMIN_TOKEN).
	nameStrong = iota
	// nameParam holds a secret as a parameter (key=, sig=): only after "="
	// or %3D, and only as a whole word (or after a percent-encoded
	// character: %3Fsig%3D), since "key: …", "monkey=" and "signature
	// verification failed" are ordinary text.
	nameParam
	// nameHeader is an HTTP header whose value is a credential to the end
	// of the line (or of the quoted string); Authorization's scheme
	// (Bearer, Basic, AWS4-HMAC-SHA256) is kept.
	nameHeader
	// nameBearer is followed by a bearer token.
	nameBearer
	// namePEM begins a private key's PEM block, hidden to its END line.
	namePEM
)

// secretNames are the names RedactText looks for, in lower case.
var secretNames = map[string]int{
	"password": nameStrong, "passwd": nameStrong, "secret": nameStrong, "token": nameStrong,
	"apikey": nameStrong, "api_key": nameStrong, "api-key": nameStrong,
	"accesskey": nameStrong, "access_key": nameStrong, "access-key": nameStrong,
	"secretkey": nameStrong, "secret_key": nameStrong, "secret-key": nameStrong,
	"privatekey": nameStrong, "private_key": nameStrong, "private-key": nameStrong,
	"accountkey": nameStrong, "account_key": nameStrong, "account-key": nameStrong,
	"connectionstring": nameStrong, "connection_string": nameStrong, "connection-string": nameStrong,
	"sharedaccesssignature": nameStrong,
	"key":                   nameParam, "sig": nameParam, "sas": nameParam, "pwd": nameParam, "signature": nameParam,
	"credential": nameParam, "auth": nameParam,
	"authorization": nameHeader, "proxy-authorization": nameHeader, "cookie": nameHeader, "set-cookie": nameHeader,
	"bearer":      nameBearer,
	"-----begin ": namePEM,
}

// secretWords are what every name of secretNames contains, in lower
// case: a text with none of them (most lines a program writes) is not
// searched further, and RedactText looks for names only where they occur.
var secretWords = [...]string{"pass", "secret", "token", "key", "connection", "sig", "sas", "pwd", "credential", "auth", "cookie", "bearer", "-----begin "}

// wordNames lists, for each of secretWords, the names that contain it and
// where.
var wordNames = func() (m [len(secretWords)][]wordName) {
	for k, w := range secretWords {
		for name, kind := range secretNames {
			for off := 0; ; {
				i := strings.Index(name[off:], w)
				if i < 0 {
					break
				}
				m[k] = append(m[k], wordName{name, kind, off + i})
				off += i + 1
			}
		}
		if len(m[k]) == 0 {
			panic("queue: secret word " + w + " is in no name")
		}
	}
	return m
}()

type wordName struct {
	name string
	kind int
	off  int // where the word is in name
}

// RedactText hides the secrets in free text, an error's or a program's
// output, whatever their shape: a URL's password (redis://:pw@h becomes
// redis://:xxxxx@h), a secret parameter's value in a URL or outside one
// (sig=, token=, password=, key=, X-Amz-Signature= and the other names
// Redact knows, percent-encoded too: %3Fsig%3D…), a value after a name
// that always holds a secret (AccountKey=…; in an Azure connection string,
// SharedAccessSignature=…, AWS_SECRET_ACCESS_KEY=…, "password":"…" in
// JSON, password: … in YAML, client_secret, api-key, quoted or not, in any
// case), an Authorization or Cookie header's credentials (the scheme,
// Bearer or Basic, is kept), a bearer token and a private key's PEM block.
// Each becomes REDACTED in place; the rest of the text, line breaks
// included, is kept byte for byte. Redacting twice changes nothing. It
// runs in time linear in the text.
func RedactText(s string) string {
	if strings.Contains(s, "://") && strings.Contains(s, "@") {
		s = urlInText.ReplaceAllStringFunc(s, redactUserinfo)
	}
	ls := lowerASCII(s)
	if !mayHoldSecret(ls) {
		return s
	}
	var b strings.Builder
	done := 0                      // s[:done] is written to b
	var next [len(secretWords)]int // where each word is next found from pos; -1: nowhere
	for k, w := range secretWords {
		next[k] = strings.Index(ls, w)
	}
	for pos := 0; pos < len(s); {
		// The next place one of secretWords occurs, each word searched
		// for again only once pos has passed it: linear in the text.
		c, word := -1, 0
		for k, w := range secretWords {
			if next[k] >= 0 && next[k] < pos {
				if i := strings.Index(ls[pos:], w); i >= 0 {
					next[k] = pos + i
				} else {
					next[k] = -1
				}
			}
			if next[k] >= 0 && (c < 0 || next[k] < c) {
				c, word = next[k], k
			}
		}
		if c < 0 {
			break
		}
		start, end, ok := secretAt(s, ls, pos, c, word)
		if !ok {
			pos = c + 1
			continue
		}
		if end > start && start > 0 && (s[start-1] == ' ' || s[start-1] == '\t') && nameAt(ls, start) {
			// What follows the name and a blank is the next name and its
			// separator (a value left empty: "password: token: …"): the
			// secret is after that one.
			pos = max(start, c+1)
			continue
		}
		if end > start && s[start:end] != "REDACTED" {
			b.WriteString(s[done:start])
			b.WriteString("REDACTED")
			done = end
		}
		pos = max(end, c+1)
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// lowerASCII is s with its ASCII letters in lower case: the same length,
// so that an offset in one is the same in the other.
func lowerASCII(s string) string {
	lower := []byte(s)
	for i, c := range lower {
		if 'A' <= c && c <= 'Z' {
			lower[i] = c + 'a' - 'A'
		}
	}
	return string(lower)
}

// mayHoldSecret reports whether ls, a text in lower case, contains one of
// secretWords.
func mayHoldSecret(ls string) bool {
	for _, w := range secretWords {
		if strings.Contains(ls, w) {
			return true
		}
	}
	return false
}

// secretAt looks for a name of secretNames around secretWords[word],
// found at ls[c] (ls is s in lower case), that begins at pos or after, and
// returns the bounds of the value it names in s.
func secretAt(s, ls string, pos, c, word int) (start, end int, ok bool) {
	for _, wn := range wordNames[word] {
		st := c - wn.off
		e := st + len(wn.name)
		if st < pos || e > len(ls) || ls[st:e] != wn.name {
			continue
		}
		wordBefore := st > 0 && isWordByte(ls[st-1])
		switch wn.kind {
		case nameStrong:
			if v, ok := afterSeparator(ls, e, true); ok {
				start, end = secretValue(s, v, wn.name == "sharedaccesssignature")
				return start, end, true
			}
		case nameParam:
			encoded := st >= 3 && ls[st-3] == '%' && isHex(ls[st-2]) && isHex(ls[st-1])
			if wordBefore && !encoded {
				continue
			}
			if v, ok := afterSeparator(ls, e, false); ok {
				start, end = secretValue(s, v, false)
				return start, end, true
			}
		case nameHeader:
			if wordBefore {
				continue
			}
			if v, ok := afterSeparator(ls, e, true); ok && !strings.HasPrefix(ls[e:], "%3d") {
				start, end = headerValue(s, v, strings.HasSuffix(wn.name, "authorization"))
				return start, end, true
			}
		case nameBearer:
			if wordBefore || e >= len(s) || s[e] != ' ' && s[e] != '\t' {
				continue
			}
			v := skipBlanks(s, e)
			end = v
			for end < len(s) && isTokenByte(s[end]) {
				end++
			}
			return v, end, true
		case namePEM:
			// -----BEGIN [A-Z0-9 ]* PRIVATE KEY-----, to its END line.
			j := e
			for j < len(ls) && j-e <= 40 && (isAlnum(ls[j]) || ls[j] == ' ') && !strings.HasPrefix(ls[j:], "private key-----") {
				j++
			}
			if !strings.HasPrefix(ls[j:], "private key-----") {
				continue
			}
			v := j + len("private key-----")
			if i := strings.Index(ls[v:], "-----end "); i >= 0 {
				return v, v + i, true
			}
			return v, len(s), true
		}
	}
	return 0, 0, false
}

// nameAt reports whether one of secretNames, exactly, begins at ls[i],
// followed by ":" or "=" (a value that only ends in one, BEARERSECRET: or
// sig=SIGSECRET%3D, is a value).
func nameAt(ls string, i int) bool {
	k := i
	for k < len(ls) && (isWordByte(ls[k]) || ls[k] == '-' || ls[k] == '.') {
		k++
	}
	kind, ok := secretNames[ls[i:k]]
	if !ok || kind == namePEM || kind == nameBearer || strings.HasPrefix(ls[k:], "%3d") {
		return false
	}
	_, ok = afterSeparator(ls, k, kind != nameParam)
	return ok
}

// afterSeparator is where the value begins after a name that ends at
// ls[e]: right after "=" or %3D; or, when colon is set (a name that always
// holds a secret), after an optional quote (or backslash and quote, in
// JSON quoted again), blanks, ":" or "=", and blanks. It reports false
// when no separator follows.
func afterSeparator(ls string, e int, colon bool) (int, bool) {
	if strings.HasPrefix(ls[e:], "%3d") {
		return e + 3, true
	}
	if !colon {
		// A parameter: its value follows at once (key=, sig=).
		if e < len(ls) && ls[e] == '=' {
			return e + 1, true
		}
		return 0, false
	}
	if e+1 < len(ls) && ls[e] == '\\' && (ls[e+1] == '"' || ls[e+1] == '\'') {
		e += 2
	} else if e < len(ls) && (ls[e] == '"' || ls[e] == '\'') {
		e++
	}
	e = skipBlanks(ls, e)
	if e < len(ls) && (ls[e] == ':' || ls[e] == '=') {
		return skipBlanks(ls, e+1), true
	}
	return 0, false
}

// skipBlanks is the first index from i of s that is not a space or a tab.
func skipBlanks(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

func isWordByte(c byte) bool { return isAlnum(c) || c == '_' }

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// redactUserinfo hides the password of a URL found in text, in place
// (Redact would re-encode the rest): between the scheme's "://" and the
// last "@" before the query, after the first ":". A password with a "/"
// or a bare "%" in it (a URL that does not parse) is hidden all the same.
func redactUserinfo(raw string) string {
	i := strings.Index(raw, "://") + 3
	end := len(raw)
	if j := strings.IndexAny(raw[i:], "?#"); j >= 0 {
		end = i + j
	}
	at := strings.LastIndexByte(raw[i:end], '@')
	if at < 0 {
		return raw
	}
	at += i
	colon := strings.IndexByte(raw[i:at], ':')
	if colon < 0 {
		return raw
	}
	colon += i
	if raw[colon+1:at] == "xxxxx" || colon+1 == at {
		return raw
	}
	return raw[:colon+1] + "xxxxx" + raw[at:]
}

// secretValue is the bounds of the value that starts at s[i]: a quoted
// string ("…" with its backslash escapes, or '…') within the line, without
// its quotes; after an escaped quote (\" in JSON that was quoted again),
// up to the next backslash; else up to a space, a quote, &, ;, a comma, <,
// > or a backslash, or their percent-encodings. A shared access signature
// (whose own parameters are joined by &) ends only at ; or a space.
func secretValue(s string, i int, sas bool) (start, end int) {
	if i >= len(s) {
		return i, i
	}
	switch q := s[i]; {
	case q == '"' || q == '\'':
		j := i + 1
		for j < len(s) && s[j] != q && s[j] != '\n' && s[j] != '\r' {
			if q == '"' && s[j] == '\\' && j+1 < len(s) && s[j+1] != '\n' {
				j++
			}
			j++
		}
		return i + 1, min(j, len(s))
	case q == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\''):
		i += 2
	}
	j := i
	for j < len(s) {
		c := s[j]
		if c <= ' ' || c == '"' || c == '\'' || c == ';' || c == '<' || c == '>' || c == '\\' || c == 0x7f ||
			!sas && (c == '&' || c == ',') {
			break
		}
		if c == '%' && j+2 < len(s) && encodedStop(s[j+1], s[j+2], sas) {
			break
		}
		j++
	}
	return i, j
}

// encodedStop reports whether %hl ends a value: an encoded space, quote,
// &, ;, comma or backslash.
func encodedStop(h, l byte, sas bool) bool {
	switch h {
	case '2':
		return l == '0' || l == '2' || l == '7' || !sas && (l == '6' || l == 'c' || l == 'C')
	case '3':
		return l == 'b' || l == 'B'
	case '5':
		return l == 'c' || l == 'C'
	case '0':
		return l == 'a' || l == 'A' || l == 'd' || l == 'D'
	}
	return false
}

// headerValue is the bounds of what to hide of a header's value that
// starts at s[i], within the line or the quoted string it opens. A Cookie
// header (auth not set) is hidden to the end. An Authorization header
// keeps its scheme word (Bearer, Basic, SharedKey) and hides the
// credentials after it, up to a blank (so that "Bearer X: cause", an
// error wrapped around it, keeps its cause), or to the end for a scheme
// whose parameters hold blanks (AWS4-HMAC-SHA256 Credential=…, Signature=…).
func headerValue(s string, i int, auth bool) (start, end int) {
	if i < len(s) && (s[i] == '"' || s[i] == '\'') {
		i++
	} else if i+1 < len(s) && s[i] == '\\' && (s[i+1] == '"' || s[i+1] == '\'') {
		i += 2
	}
	if strings.HasPrefix(s[i:], "REDACTED") {
		return i, i + len("REDACTED") // redacted before
	}
	end = i
	for end < len(s) && s[end] != '\n' && s[end] != '\r' && s[end] != '"' && s[end] != '\'' && s[end] != '\\' {
		end++
	}
	start = i
	if auth {
		j := i
		for j < end && (isAlnum(s[j]) || s[j] == '-') {
			j++
		}
		k := skipBlanks(s[:end], j)
		if j > i && k > j && k < end {
			start = k // after the scheme
			if sch := lowerASCII(s[i:j]); !strings.HasPrefix(sch, "aws4-") && !strings.Contains(sch, "hmac") {
				end = start
			}
		}
		if end == start || start == i {
			// One credential: up to a blank, less a trailing ":" or ","
			// (the punctuation of the text around it).
			end = start
			for end < len(s) && s[end] > ' ' && s[end] != '"' && s[end] != '\'' && s[end] != '\\' && s[end] != 0x7f {
				end++
			}
			for end > start && strings.IndexByte(":,;)", s[end-1]) >= 0 {
				end--
			}
		}
	}
	// Trailing blanks are not the secret's.
	for end > start && (s[end-1] == ' ' || s[end-1] == '\t') {
		end--
	}
	return start, end
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// isTokenByte reports whether c may be part of a bearer token (RFC 6750's
// b64token).
func isTokenByte(c byte) bool {
	return isAlnum(c) || strings.IndexByte("._~+/=-", c) >= 0
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
