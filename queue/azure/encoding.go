package azure

import (
	"encoding/base64"
	"fmt"
	"unicode/utf8"

	"github.com/adaptq/adaptq/queue"
)

// Encoding is how a body travels as an Azure message's text, which is XML
// character data.
type Encoding int

const (
	// Base64 (the default) sends the body base64-encoded, so any bytes
	// round-trip exactly. It is what Azure Functions and the .NET and
	// Python SDKs' base64 policies read and write. A message that is not
	// valid base64 (written as plain text by another producer) is handed
	// to the consumer as its text's UTF-8 bytes.
	Base64 Encoding = iota
	// Text sends the body as it is, for interoperating with producers and
	// consumers that read and write plain text. Put refuses a body that is
	// not valid UTF-8 or holds characters XML cannot carry (control
	// characters other than tab and newline, a carriage return, U+FFFE,
	// U+FFFF); nothing is written then.
	Text
)

// String is the encoding's name in URLs ("base64", "text").
func (e Encoding) String() string {
	switch e {
	case Base64:
		return "base64"
	case Text:
		return "text"
	}
	return fmt.Sprintf("Encoding(%d)", int(e))
}

// ParseEncoding reads an encoding's name.
func ParseEncoding(s string) (Encoding, error) {
	switch s {
	case "base64", "":
		return Base64, nil
	case "text":
		return Text, nil
	}
	return 0, fmt.Errorf("unknown encoding %q (want base64 or text)", s)
}

// MaxMessageSize is the most a message's text may hold: Azure's 64 KiB
// (in UTF-8 bytes, after any encoding).
const MaxMessageSize = 64 * 1024

// MaxInlineBody is the largest body that travels inline with the Base64
// encoding: 64 KiB of base64 carries 48 KiB. Larger bodies go through the
// claim-check blob. With Text the limit is MaxMessageSize itself.
const MaxInlineBody = MaxMessageSize / 4 * 3

// inlineLimit is the largest body e carries in the message itself.
func (e Encoding) inlineLimit() int {
	if e == Text {
		return MaxMessageSize
	}
	return MaxInlineBody
}

// encode turns a body into message text. It fails, wrapping
// queue.ErrInvalidArgument, for a Text body XML cannot carry.
func (e Encoding) encode(body []byte) (string, error) {
	if e == Text {
		if err := checkText(body); err != nil {
			return "", err
		}
		return string(body), nil
	}
	return base64.StdEncoding.EncodeToString(body), nil
}

// decode turns message text back into the body.
func (e Encoding) decode(text string) []byte {
	if e == Base64 {
		if b, err := base64.StdEncoding.DecodeString(text); err == nil {
			return b
		}
	}
	return []byte(text)
}

// checkText reports why body cannot travel as XML text, if it cannot: it
// must be valid UTF-8 made of XML 1.0 characters. A carriage return is
// refused too: XML parsers turn CR LF and a lone CR into LF, so it would
// not come back as it went.
func checkText(body []byte) error {
	for i := 0; i < len(body); {
		r, size := utf8.DecodeRune(body[i:])
		if r == utf8.RuneError && size <= 1 {
			return fmt.Errorf("%w: body is not valid UTF-8 at byte %d (encoding=text carries only text; use the default base64 for bytes)",
				queue.ErrInvalidArgument, i)
		}
		if !xmlChar(r) {
			return fmt.Errorf("%w: body holds %U at byte %d, which XML text cannot carry (encoding=text; use the default base64 for bytes)",
				queue.ErrInvalidArgument, r, i)
		}
		i += size
	}
	return nil
}

// xmlChar reports whether r may appear in XML 1.0 text and survive a
// parser unchanged.
func xmlChar(r rune) bool {
	switch {
	case r == '\t' || r == '\n':
		return true
	case r < 0x20:
		return false // includes '\r'
	case r <= 0xD7FF:
		return true
	case r >= 0xE000 && r <= 0xFFFD:
		return true
	case r >= 0x10000 && r <= utf8.MaxRune:
		return true
	}
	return false
}
