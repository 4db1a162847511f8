package poison_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/poison"
)

func sample(body []byte) poison.Message {
	t0 := time.Date(2026, 11, 22, 20, 0, 0, 0, time.UTC)
	return poison.Message{
		ID: "msg-42", Queue: "orders", DequeueCount: 5, Rule: poison.RuleMaxDequeue,
		Reason: "exit status 3: downstream said <503>", FailedAt: t0.Add(time.Minute),
		InsertedAt: t0, ExpiresAt: t0.Add(7 * 24 * time.Hour), Body: body,
	}
}

func TestEnvelopeRoundTripKeepsEveryFieldAndTheBodyByteExact(t *testing.T) {
	t.Parallel()
	for _, body := range [][]byte{
		[]byte("hello"),
		{},
		{0, 1, 2, 0xff, '\n', '\r', 0}, // binary, with newlines
		[]byte("adaptq-poison/1 {\"id\":\"x\"}\nnested"), // looks like an envelope itself
		bytes.Repeat([]byte("é\n"), 1000),
	} {
		in := sample(body)
		b, err := poison.Encode(in, queue.DefaultMaxBodySize)
		if err != nil {
			t.Fatalf("Encode(%q): %v", body, err)
		}
		if !bytes.HasPrefix(b, []byte(poison.Magic)) {
			t.Fatalf("envelope %q does not start with the magic", b)
		}
		out := poison.Decode(&queue.Message{ID: "p-1", Body: b, InsertedAt: in.FailedAt})
		if !out.Enveloped || out.PoisonID != "p-1" || !out.PoisonedAt.Equal(in.FailedAt) {
			t.Fatalf("Decode: enveloped %v, poison id %q, poisoned at %v", out.Enveloped, out.PoisonID, out.PoisonedAt)
		}
		if !bytes.Equal(out.Body, body) || out.Size != len(body) {
			t.Errorf("body %q (size %d), want %q", out.Body, out.Size, body)
		}
		if out.ID != in.ID || out.Queue != in.Queue || out.DequeueCount != in.DequeueCount || out.Rule != in.Rule || out.Reason != in.Reason ||
			!out.FailedAt.Equal(in.FailedAt) || !out.InsertedAt.Equal(in.InsertedAt) || !out.ExpiresAt.Equal(in.ExpiresAt) {
			t.Errorf("metadata %+v, want %+v", out, in)
		}
	}
}

func TestEnvelopeHeaderIsOneLineOfText(t *testing.T) {
	t.Parallel()
	in := sample([]byte{0xff})
	in.Reason = "line one\nline two\r\x00\x1b[31m\xff\uFFFE"
	b, err := poison.Encode(in, 0)
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	if !utf8.Valid(line) || bytes.ContainsAny(line, "\r\x00\x1b") || strings.ContainsRune(string(line), '\uFFFE') {
		t.Errorf("header %q is not clean text", line)
	}
	out := poison.Decode(&queue.Message{ID: "p", Body: b})
	if !strings.HasPrefix(out.Reason, "line one line two") || !bytes.Equal(out.Body, []byte{0xff}) {
		t.Errorf("reason %q, body %q", out.Reason, out.Body)
	}
}

func TestEnvelopeCutsTheReasonToItsBoundAndToTheBodyLimit(t *testing.T) {
	t.Parallel()
	in := sample([]byte("body"))
	in.Reason = strings.Repeat("ü", 3000) // 6,000 bytes
	b, err := poison.Encode(in, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := poison.Decode(&queue.Message{ID: "p", Body: b})
	if len(out.Reason) > poison.MaxReason || !strings.HasSuffix(out.Reason, "…") || !utf8.ValidString(out.Reason) {
		t.Errorf("reason of %d bytes (valid %v), want at most %d ending in …", len(out.Reason), utf8.ValidString(out.Reason), poison.MaxReason)
	}

	// A body that nearly fills the limit: the reason gives way, the body
	// does not.
	in.Reason = strings.Repeat(`"quoted" `, 100)
	in.Body = bytes.Repeat([]byte("x"), 1000)
	b, err = poison.Encode(in, 0)
	if err != nil {
		t.Fatal(err)
	}
	limit := len(b) - 200
	b, err = poison.Encode(in, limit)
	if err != nil {
		t.Fatalf("Encode with a limit %d: %v", limit, err)
	}
	out = poison.Decode(&queue.Message{ID: "p", Body: b})
	if len(b) > limit || !out.Enveloped || !bytes.Equal(out.Body, in.Body) || len(out.Reason) >= len(in.Reason) || out.Reason == "" {
		t.Errorf("envelope of %d bytes for a limit of %d: enveloped %v, reason %d bytes", len(b), limit, out.Enveloped, len(out.Reason))
	}

	// No room for the header beside the body: it is compressed.
	b, err = poison.Encode(in, len(in.Body)+10)
	if out := poison.Decode(&queue.Message{ID: "p", Body: b}); err != nil || len(b) > len(in.Body)+10 || !out.Enveloped || out.Truncated || !bytes.Equal(out.Body, in.Body) {
		t.Errorf("Encode with no room for the header: %v, %d bytes, %+v; want a compressed envelope of the whole body", err, len(b), out)
	}

	// Not even the header fits: ErrTooLarge, for the caller to fall back on.
	if _, err := poison.Encode(in, 40); !errors.Is(err, poison.ErrTooLarge) || !errors.Is(err, queue.ErrTooLarge) {
		t.Errorf("Encode with no room for the header: %v, want ErrTooLarge", err)
	}
}

// randomBytes is n random bytes: a body that does not compress.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return b
}

// A compressed envelope whose body inflates to other than its size is a
// bare body, and inflating never follows a size a header merely claims.
func TestDecodeRefusesACompressedBodyOfAnotherSize(t *testing.T) {
	t.Parallel()
	in := sample(bytes.Repeat([]byte("a"), 5000))
	b, err := poison.Encode(in, 1000)
	if err != nil || !bytes.HasPrefix(b, []byte(poison.Magic2)) {
		t.Fatalf("Encode: %.40q, %v", b, err)
	}
	for _, size := range []string{`"size":5000`, `"size":4999`, `"size":5001`} {
		forged := bytes.Replace(b, []byte(`"size":5000`), []byte(size), 1)
		m := poison.Decode(&queue.Message{ID: "p", Body: forged})
		if want := size == `"size":5000`; m.Enveloped != want || (want && !bytes.Equal(m.Body, in.Body)) || (!want && !bytes.Equal(m.Body, forged)) {
			t.Errorf("%s: enveloped %v, body of %d bytes", size, m.Enveloped, len(m.Body))
		}
	}
}

// A body at the poison queue's limit still gets an envelope: compressed
// when it compresses (and read back byte for byte), else cut short and
// marked so. No body is ever stored bare, so none can pass for an
// envelope; one that starts like an envelope itself stays the body.
func TestEnvelopeOfABodyAtTheLimitIsNeverBare(t *testing.T) {
	t.Parallel()
	const limit = queue.DefaultMaxBodySize
	forged := []byte(poison.Magic + `{"id":"x","queue":"payments","dequeue_count":5,"size":` + fmt.Sprint(limit-70) + "}\n")
	forged = append(forged, bytes.Repeat([]byte(" "), limit-len(forged))...)
	for _, tc := range []struct {
		name      string
		body      []byte
		truncated bool
	}{
		{"text", bytes.Repeat([]byte(`{"order":"A1","qty":3} `), limit/23+1)[:limit], false},
		{"an imitation of an envelope", forged, false},
		{"random bytes", randomBytes(limit), true},
	} {
		in := sample(tc.body)
		b, err := poison.Encode(in, limit)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(b) > limit || !bytes.HasPrefix(b, []byte(poison.Magic2)) {
			t.Fatalf("%s: envelope of %d bytes (limit %d) starting %.20q", tc.name, len(b), limit, b)
		}
		out := poison.Decode(&queue.Message{ID: "p", Body: b})
		if !out.Enveloped || out.Queue != "orders" || out.ID != in.ID || out.Truncated != tc.truncated || out.Size != len(tc.body) {
			t.Fatalf("%s: decoded enveloped %v, queue %q, id %q, truncated %v, size %d", tc.name, out.Enveloped, out.Queue, out.ID, out.Truncated, out.Size)
		}
		sum := sha256.Sum256(tc.body)
		switch {
		case !tc.truncated && !bytes.Equal(out.Body, tc.body):
			t.Errorf("%s: body of %d bytes, not the original's %d", tc.name, len(out.Body), len(tc.body))
		case tc.truncated && (!bytes.HasPrefix(tc.body, out.Body) || len(out.Body) < limit/2 || out.SHA256 != hex.EncodeToString(sum[:])):
			t.Errorf("%s: kept %d bytes, sha256 %s: want a prefix of the body and its digest", tc.name, len(out.Body), out.SHA256)
		}
	}
}

// randomRunes is about n bytes of random text in 1- to 4-byte characters:
// text that compresses poorly.
func randomRunes(n int) []byte {
	runes := []rune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789éüßñøåæçЖЯ€→♥𝄞😀")
	var b []byte
	for len(b) < n-4 {
		b = utf8.AppendRune(b, runes[rand.IntN(len(runes))])
	}
	return b
}

// A text body's envelope is text whatever its size (Azure's text encoding
// refuses anything else, and a poison put that fails leaves the message
// in its queue): compressed bodies travel in base64, and a body cut short
// is cut between characters.
func TestEnvelopeOfATextBodyIsText(t *testing.T) {
	t.Parallel()
	const limit = queue.DefaultMaxBodySize
	for _, body := range [][]byte{
		bytes.Repeat([]byte(`{"order":"Ä1","qty":3} `), limit/24+1)[:limit],
		randomRunes(limit),
	} {
		b, err := poison.Encode(sample(body), limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > limit || !utf8.Valid(b) || bytes.ContainsAny(b, "\x00\x01\x02\x03\x1b\r\x7f") {
			t.Errorf("envelope of %d bytes (limit %d) of a text body: valid UTF-8 %v, starts %.60q", len(b), limit, utf8.Valid(b), b)
		}
		out := poison.Decode(&queue.Message{ID: "p", Body: b})
		if !out.Enveloped || !bytes.HasPrefix(body, out.Body) || (!out.Truncated && len(out.Body) != len(body)) {
			t.Errorf("decoded enveloped %v, truncated %v, %d of %d bytes", out.Enveloped, out.Truncated, len(out.Body), len(body))
		}
	}
}

// EncodeOrBare, for a limit too small for any header, puts a body bare
// only if it cannot be read as an envelope.
func TestEncodeOrBareNeverPutsAnImitationBare(t *testing.T) {
	t.Parallel()
	in := sample(bytes.Repeat([]byte{0xfe}, 64))
	b, bare, err := poison.EncodeOrBare(in, 64)
	if err != nil || !bare || !bytes.Equal(b, in.Body) {
		t.Errorf("a body of 64 bytes at a limit of 64: %v, bare %v", err, bare)
	}
	in.Body = []byte(poison.Magic + `{"id":"x","queue":"payments","size":1}` + "\nx")
	if b, bare, err := poison.EncodeOrBare(in, 64); !errors.Is(err, poison.ErrImitation) || bare || b != nil {
		t.Errorf("an imitation at a limit of 64: %q, bare %v, %v; want ErrImitation", b, bare, err)
	}
	if b, bare, err := poison.EncodeOrBare(in, 0); err != nil || bare || !bytes.HasPrefix(b, []byte(poison.Magic)) {
		t.Errorf("an imitation with room: %.30q, bare %v, %v; want an envelope", b, bare, err)
	}
}

func TestDecodeReadsABareBodyAsUnknownMetadata(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	good, _ := poison.Encode(sample([]byte("abc")), 0)
	for _, body := range [][]byte{
		[]byte("an old poison message"),
		{0, 0, 0, 0, 0, 0, 0, 7},                                  // the soak's sequence number
		[]byte(poison.Magic + "not json\nbody"),                   // magic, no header
		[]byte(poison.Magic + `{"id":"x","size":99}` + "\nshort"), // size does not match
		good[:len(good)-1],                                        // cut short
		[]byte(poison.Magic2 + `{"id":"x","size":5,"encoding":"deflate-base64","stored":3}` + "\nabc"),                                 // not deflate
		[]byte(poison.Magic2 + `{"id":"x","size":1099511627776,"encoding":"deflate-base64","stored":3}` + "\nabc"),                     // claims 1 TiB
		[]byte(poison.Magic2 + `{"id":"x","size":9,"truncated":true,"stored":3}` + "\nabc"),                                            // no digest
		[]byte(poison.Magic2 + `{"id":"x","size":3,"stored":3}` + "\nabc"),                                                             // version 2, plain
		[]byte(poison.Magic2 + `{"id":"x","size":9,"truncated":true,"stored":4,"sha256":"` + strings.Repeat("0", 64) + `"}` + "\nabc"), // stored does not match
	} {
		m := poison.Decode(&queue.Message{ID: "p-9", Body: body, InsertedAt: at})
		if m.Enveloped || !bytes.Equal(m.Body, body) || m.Size != len(body) || m.PoisonID != "p-9" || !m.PoisonedAt.Equal(at) ||
			m.ID != "" || m.Queue != "" || m.DequeueCount != 0 || m.Reason != "" {
			t.Errorf("Decode(%q) = %+v, want the bare body with unknown metadata", body, m)
		}
	}
}

func TestMessageJSONRoundTrip(t *testing.T) {
	t.Parallel()
	for _, body := range [][]byte{[]byte("text body"), {0xff, 0}} {
		b, _ := poison.Encode(sample(body), 0)
		in := poison.Decode(&queue.Message{ID: "p", Body: b, InsertedAt: time.Unix(1, 0)})
		j, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var out poison.Message
		if err := json.Unmarshal(j, &out); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Body, body) || out.ID != in.ID || out.Reason != in.Reason || !out.FailedAt.Equal(in.FailedAt) || !out.Enveloped {
			t.Errorf("JSON %s read back as %+v", j, out)
		}
	}
}

// Any body and reason round-trip: the body byte for byte, the reason
// cleaned and cut; any poison message decodes without failing.
func FuzzEnvelope(f *testing.F) {
	f.Add([]byte("hello"), "exit status 3")
	f.Add([]byte{0, 0xff, '\n'}, "line\nline\r\x00")
	f.Add([]byte(poison.Magic+`{"id":"x","size":1}`+"\nx"), "")
	f.Add([]byte(poison.Magic2+`{"id":"x","size":1,"encoding":"deflate-base64","stored":3}`+"\nabc"), "")
	f.Fuzz(func(t *testing.T, body []byte, reason string) {
		bare := poison.Decode(&queue.Message{ID: "p", Body: body})
		if !bare.Enveloped && !bytes.Equal(bare.Body, body) {
			t.Fatalf("a bare body %q decoded as %q", body, bare.Body)
		}
		in := sample(body)
		in.Reason = reason
		b, err := poison.Encode(in, 0)
		if err != nil {
			t.Fatal(err)
		}
		out := poison.Decode(&queue.Message{ID: "p", Body: b})
		if !out.Enveloped || !bytes.Equal(out.Body, body) || out.ID != in.ID || len(out.Reason) > poison.MaxReason || !utf8.ValidString(out.Reason) {
			t.Fatalf("Encode/Decode of %q, reason %q: %+v", body, reason, out)
		}
		// With a limit that leaves no room beside the body: compressed
		// whole, or cut short and marked so; never bare, never another
		// body.
		limit := len(body) + 1
		b, err = poison.Encode(in, limit)
		if errors.Is(err, poison.ErrTooLarge) {
			return // not even a header fits in so small a limit
		}
		out = poison.Decode(&queue.Message{ID: "p", Body: b})
		if err != nil || len(b) > limit || !out.Enveloped || out.Size != len(body) ||
			(out.Truncated && !bytes.HasPrefix(body, out.Body)) || (!out.Truncated && !bytes.Equal(out.Body, body)) {
			t.Fatalf("Encode of %q at a limit of %d: %v, %+v", body, limit, err, out)
		}
	})
}
