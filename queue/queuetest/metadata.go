package queuetest

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/adaptq/adaptq/queue"
)

// metadataSample is metadata a driver must carry unchanged: W3C trace
// context as the tracing middleware writes it, and text with characters
// of every plane, quotes, and the separators an encoding might use.
func metadataSample() map[string]string {
	return map[string]string{
		"traceparent":  "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tracestate":   "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
		"tenant_id":    `Zoë "quoted" 🍕 {"a":1} = & | ; \n`,
		"schema-ver.2": "line1\nline2\r\n\tend",
	}
}

// testMetadataRoundTrip: metadata put with a message comes back with it on
// Get, Peek and PeekAfter, on redelivery too, and a message put without
// any has none; the caller's changes to its copies touch nothing stored.
func testMetadataRoundTrip(t *testing.T, e *env) {
	q := e.open(t, "metadata")
	if e.f.Metadata.MaxPairs == 0 {
		_, err := q.Put(e.ctx, []byte("m"), queue.PutOptions{Metadata: map[string]string{"k": "v"}})
		wantErr(t, "Put with metadata on a driver without it", err, queue.ErrInvalidMetadata)
		if n := e.count(t, q); n != 0 {
			t.Fatalf("Count = %d after a refused put, want 0", n)
		}
		t.Skip("the driver's Features say it stores no metadata")
	}
	md := metadataSample()
	for len(md) > e.f.Metadata.MaxPairs {
		for k := range md {
			delete(md, k)
			break
		}
	}
	in := maps.Clone(md)
	withID := e.put(t, q, "with", queue.PutOptions{Metadata: in})
	in["traceparent"] = "changed by the caller after Put"
	plainID := e.put(t, q, "plain", queue.PutOptions{})
	emptyID := e.put(t, q, "empty", queue.PutOptions{Metadata: map[string]string{}})
	check := func(how string, m *queue.Message) {
		t.Helper()
		switch m.ID {
		case withID:
			if string(m.Body) != "with" || !maps.Equal(m.Metadata, md) {
				t.Errorf("%s: %q with metadata %q, want %q with %q", how, m.Body, m.Metadata, "with", md)
			}
		case plainID, emptyID:
			if m.Metadata != nil {
				t.Errorf("%s: %q put without metadata comes with %q, want nil", how, m.Body, m.Metadata)
			}
			if b := string(m.Body); b != "plain" && b != "empty" {
				t.Errorf("%s: body %q", how, b)
			}
		default:
			t.Errorf("%s: unknown id %s", how, m.ID)
		}
	}
	if e.peek() > 0 {
		ps, err := q.Peek(e.ctx, e.peek())
		if err != nil || len(ps) != 3 {
			t.Fatalf("Peek = %d, %v; want 3", len(ps), err)
		}
		for _, p := range ps {
			check("Peek", p)
			for k := range p.Metadata {
				p.Metadata[k] = "changed by the caller after Peek"
			}
		}
	}
	if q.PeekPages() {
		ps, err := q.PeekAfter(e.ctx, "", 3)
		if err != nil || len(ps) != 3 {
			t.Fatalf("PeekAfter = %d, %v; want 3", len(ps), err)
		}
		for _, p := range ps {
			check("PeekAfter", p)
		}
	}
	seen := 0
	for seen < 3 {
		ms := e.get(t, q, min(e.batch(), 3), 30*unit)
		if len(ms) == 0 {
			t.Fatalf("Get after %d of 3 returned none", seen)
		}
		for _, m := range ms {
			check("Get", m)
			for k := range m.Metadata {
				m.Metadata[k] = "changed by the caller after Get"
			}
			if _, err := q.UpdateVisibility(e.ctx, m.ID, m.PopReceipt, 0); err != nil {
				t.Fatalf("UpdateVisibility: %v", err)
			}
		}
		seen += len(ms)
	}
	seen = 0
	for seen < 3 {
		ms := e.get(t, q, min(e.batch(), 3), 30*unit)
		if len(ms) == 0 {
			t.Fatalf("second Get after %d of 3 returned none", seen)
		}
		for _, m := range ms {
			check("Get again", m)
			if err := q.Delete(e.ctx, m.ID, m.PopReceipt); err != nil {
				t.Fatalf("Delete: %v", err)
			}
		}
		seen += len(ms)
	}
}

// testMetadataLimits: metadata over a limit of Features().Metadata, or with
// a key outside the portable rule, is refused with a *MetadataError naming
// the key and the limit, and nothing is written; metadata at the limits is
// stored.
func testMetadataLimits(t *testing.T, e *env) {
	q := e.open(t, "metadata-limits")
	lim := e.f.Metadata
	e.need(t, lim.MaxPairs > 0, "metadata", nil)
	maxValue := lim.MaxValue
	if lim.InBody {
		// Leave the body's room for the other pairs and the body.
		maxValue = min(maxValue, e.maxBody()/2)
	}
	full := map[string]string{strings.Repeat("k", lim.MaxKey): strings.Repeat("v", maxValue)}
	for i := 1; i < lim.MaxPairs; i++ {
		full["k"+string(rune('a'+i%26))+strings.Repeat("x", i/26)] = "v"
	}
	if _, err := q.Put(e.ctx, []byte("full"), queue.PutOptions{Metadata: full}); err != nil {
		t.Fatalf("Put with metadata at the limits (%d pairs, a %d-byte key, a %d-byte value): %v", len(full), lim.MaxKey, maxValue, err)
	}
	tooMany := maps.Clone(full)
	tooMany["one-more"] = "v"
	cases := []struct {
		name  string
		md    map[string]string
		key   string
		limit string
		large bool
	}{
		{"too many pairs", tooMany, "", "pairs", true},
		{"long key", map[string]string{strings.Repeat("k", lim.MaxKey+1): "v"}, strings.Repeat("k", lim.MaxKey+1), "key size", true},
		{"long value", map[string]string{"big": strings.Repeat("v", lim.MaxValue+1)}, "big", "value size", true},
		{"key with a space", map[string]string{"ok": "v", "a b": "v"}, "a b", "key characters", false},
		{"reserved prefix", map[string]string{"AWS.trace": "v"}, "AWS.trace", "key characters", false},
		{"adaptq's prefix", map[string]string{"Adaptq-ttl": "v"}, "Adaptq-ttl", "key characters", false},
		{"leading dot", map[string]string{".k": "v"}, ".k", "key characters", false},
		{"double dot", map[string]string{"a..b": "v"}, "a..b", "key characters", false},
		{"non-ASCII key", map[string]string{"clé": "v"}, "clé", "key characters", false},
		{"empty key", map[string]string{"": "v"}, "", "key characters", false},
		{"empty value", map[string]string{"k": ""}, "k", "empty value", false},
		{"control character", map[string]string{"k": "a\x00b"}, "k", "value characters", false},
		{"not UTF-8", map[string]string{"k": "\xff\xfe"}, "k", "value characters", false},
	}
	if lim.InBody {
		cases = append(cases, struct {
			name  string
			md    map[string]string
			key   string
			limit string
			large bool
		}{"body and metadata too large", map[string]string{"k": "v"}, "", "body size", true})
	}
	for _, c := range cases {
		body := []byte("refused")
		if c.limit == "body size" {
			body = make([]byte, e.maxBody())
		}
		_, err := q.Put(e.ctx, body, queue.PutOptions{Metadata: c.md})
		var me *queue.MetadataError
		if !errors.As(err, &me) || !errors.Is(err, queue.ErrInvalidMetadata) {
			t.Errorf("%s: Put = %v, want a *queue.MetadataError", c.name, err)
			continue
		}
		if me.Key != c.key || me.Limit != c.limit {
			t.Errorf("%s: error names key %q and limit %q, want %q and %q (%v)", c.name, me.Key, me.Limit, c.key, c.limit, err)
		}
		if errors.Is(err, queue.ErrTooLarge) != c.large {
			t.Errorf("%s: errors.Is(ErrTooLarge) = %v, want %v", c.name, !c.large, c.large)
		}
		if c.key != "" && !strings.Contains(err.Error(), c.key[:min(len(c.key), 20)]) {
			t.Errorf("%s: error %q does not name the key", c.name, err)
		}
	}
	if n := e.count(t, q); n != 1 {
		t.Fatalf("Count = %d after the refused puts, want 1 (nothing written)", n)
	}
	m := e.getOne(t, q, 30*unit)
	if string(m.Body) != "full" || !maps.Equal(m.Metadata, full) {
		t.Fatalf("the message at the limits came back as %q with %d pairs, want %q with %d", m.Body, len(m.Metadata), "full", len(full))
	}
}
