package azure_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
	"github.com/adaptq/adaptq/queue/driver"
)

// TestMetadataInterop: a message without metadata is the same text a raw
// SDK producer writes and reads (base64 and text encodings); one with
// metadata is the documented envelope, which a raw consumer can read and a
// raw producer can write; a raw body that only looks like the envelope
// comes as it was; and an adaptq body that starts like one round-trips.
func TestMetadataInterop(t *testing.T) {
	srv := azuritetest.Shared(t)
	name := uniq(t, "meta-interop")
	q, err := queue.Open(ctx, srv.URL(name))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	raw := rawQueue(t, srv, name)
	getOne := func(what string) *queue.Message {
		t.Helper()
		ms, err := q.Get(ctx, 1, time.Minute)
		if err != nil || len(ms) != 1 {
			t.Fatalf("%s: Get = %d, %v", what, len(ms), err)
		}
		if err := q.Delete(ctx, ms[0].ID, ms[0].PopReceipt); err != nil {
			t.Fatal(err)
		}
		return ms[0]
	}

	// Without metadata: byte for byte what it was.
	if _, err := q.Put(ctx, []byte("plain"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := rawText(t, srv, name); got != base64.StdEncoding.EncodeToString([]byte("plain")) {
		t.Fatalf("a message without metadata went as %q", got)
	}
	if m := getOne("plain"); string(m.Body) != "plain" || m.Metadata != nil {
		t.Fatalf("plain: %q with %q", m.Body, m.Metadata)
	}

	// With metadata: the envelope, read by a raw consumer.
	md := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": `<Zoë> & "co"`}
	body := []byte{0, 1, '\n', 0xff}
	if _, err := q.Put(ctx, body, queue.PutOptions{Metadata: md}); err != nil {
		t.Fatal(err)
	}
	wire, err := base64.StdEncoding.DecodeString(rawText(t, srv, name))
	if err != nil {
		t.Fatal(err)
	}
	line, rest, ok := bytes.Cut(wire, []byte("\n"))
	want := `{"adaptq":"metadata/v1","size":4,"metadata":{"tenant":"<Zoë> & \"co\"","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}`
	if !ok || string(line) != want || !bytes.Equal(rest, body) {
		t.Fatalf("the envelope on the wire is %q, want %q then the body", wire, want)
	}
	if m := getOne("enveloped"); !bytes.Equal(m.Body, body) || !maps.Equal(m.Metadata, md) {
		t.Fatalf("enveloped: %q with %q", m.Body, m.Metadata)
	}

	// A raw producer writes the envelope; and raw bodies that only look
	// like it (a wrong size, an unknown field, no newline, a bad key) come
	// as they are, with no metadata.
	rawPut := func(b string) {
		t.Helper()
		if _, err := raw.EnqueueMessage(ctx, base64.StdEncoding.EncodeToString([]byte(b)), nil); err != nil {
			t.Fatal(err)
		}
	}
	rawPut(`{"adaptq":"metadata/v1","size":2,"metadata":{"k":"v"}}` + "\nhi")
	if m := getOne("raw envelope"); string(m.Body) != "hi" || m.Metadata["k"] != "v" || len(m.Metadata) != 1 {
		t.Fatalf("a raw producer's envelope: %q with %q", m.Body, m.Metadata)
	}
	for _, look := range []string{
		`{"adaptq":"metadata/v1","size":3,"metadata":{"k":"v"}}` + "\nhi",
		`{"adaptq":"metadata/v1","size":2,"metadata":{"k":"v"},"x":1}` + "\nhi",
		`{"adaptq":"metadata/v1","size":0,"metadata":{"k":"v"}}`,
		`{"adaptq":"metadata/v1","size":2,"metadata":{"a b":"v"}}` + "\nhi",
		`{"adaptq":"metadata/v1" and then prose` + "\nhi",
	} {
		rawPut(look)
		if m := getOne("look-alike"); string(m.Body) != look || m.Metadata != nil {
			t.Errorf("a raw look-alike %q came as %q with %q", look, m.Body, m.Metadata)
		}
	}

	// An adaptq body that is itself an envelope, without metadata: it is
	// enveloped (with none), so it comes back as it went.
	look := []byte(`{"adaptq":"metadata/v1","size":2,"metadata":{"k":"v"}}` + "\nhi")
	if _, err := q.Put(ctx, look, queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if m := getOne("adaptq look-alike"); !bytes.Equal(m.Body, look) || m.Metadata != nil {
		t.Fatalf("an adaptq body that looks like the envelope came as %q with %q", m.Body, m.Metadata)
	}
}

// TestMetadataTextAndClaimCheck: the envelope in text encoding is text a
// raw consumer reads; a body too large to travel inline with its metadata
// goes to a blob and keeps its metadata in the message; without
// claim-check it is refused with the typed error and nothing is written.
func TestMetadataTextAndClaimCheck(t *testing.T) {
	srv := azuritetest.Shared(t)
	name := uniq(t, "meta-text")
	q, err := queue.Open(ctx, srv.URL(name, "encoding", "text"))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	md := map[string]string{"k": "v"}
	if _, err := q.Put(ctx, []byte("héllo"), queue.PutOptions{Metadata: md}); err != nil {
		t.Fatal(err)
	}
	if got, want := rawText(t, srv, name), `{"adaptq":"metadata/v1","size":6,"metadata":{"k":"v"}}`+"\nhéllo"; got != want {
		t.Fatalf("text envelope %q, want %q", got, want)
	}
	ms, err := q.Get(ctx, 1, time.Minute)
	if err != nil || len(ms) != 1 || string(ms[0].Body) != "héllo" || ms[0].Metadata["k"] != "v" {
		t.Fatalf("text round trip: %v", err)
	}
	_ = q.Delete(ctx, ms[0].ID, ms[0].PopReceipt)

	// Base64 with claim-check: a body that fits inline alone but not with
	// its metadata is stored as a blob.
	acct := newAccount(t, srv, azure.Config{})
	qb := openQueue(t, acct, uniq(t, "meta-cc"))
	big := map[string]string{"big": strings.Repeat("v", 4000)}
	body := randomBody(azure.MaxInlineBody - 100)
	if _, err := qb.Put(ctx, body, queue.PutOptions{Metadata: big}); err != nil {
		t.Fatal(err)
	}
	if bs := blobs(t, srv, azure.DefaultContainer, uniq(t, "meta-cc")+"/"); len(bs) != 1 {
		t.Fatalf("blobs %v, want the body stored as one", bs)
	}
	ms, err = qb.Get(ctx, 1, time.Minute)
	if err != nil || len(ms) != 1 || !bytes.Equal(ms[0].Body, body) || !maps.Equal(ms[0].Metadata, big) {
		t.Fatalf("claim-check with metadata did not round-trip: %v", err)
	}
	if err := qb.Delete(ctx, ms[0].ID, ms[0].PopReceipt); err != nil {
		t.Fatal(err)
	}

	off := newAccount(t, srv, azure.Config{NoClaimCheck: true})
	qo := openQueue(t, off, uniq(t, "meta-off"))
	_, err = qo.Put(ctx, body, queue.PutOptions{Metadata: big})
	var me *queue.MetadataError
	if !errors.As(err, &me) || me.Limit != "body size" || !errors.Is(err, queue.ErrTooLarge) {
		t.Fatalf("inline body and metadata over the message without claim-check: %v, want a body-size MetadataError", err)
	}
	if n, _ := qo.Count(ctx); n != 0 {
		t.Fatalf("a refused put wrote %d messages", n)
	}
}

// With claim-check, a body up to Config.MaxBodySize goes to a blob and
// its metadata stays in the message: metadata does not count against
// the body's limit, so a body at the limit takes metadata.
func TestMetadataBesideABodyAtTheClaimCheckLimit(t *testing.T) {
	srv := azuritetest.Shared(t)
	const max = azure.MaxInlineBody + 1000
	q := openQueue(t, newAccount(t, srv, azure.Config{MaxBodySize: max}), uniq(t, "meta-max"))
	if f := q.Features(); f.MaxBody != max || f.Metadata.InBody {
		t.Fatalf("Features: MaxBody %d, Metadata.InBody %v; want %d, false", f.MaxBody, f.Metadata.InBody, max)
	}
	md := map[string]string{"tenant": "t1"}
	body := randomBody(max)
	if _, err := q.Put(ctx, body, queue.PutOptions{Metadata: md}); err != nil {
		t.Fatalf("Put of a %d-byte body (the limit) with metadata: %v", max, err)
	}
	ms, err := q.Get(ctx, 1, time.Minute)
	if err != nil || len(ms) != 1 || !bytes.Equal(ms[0].Body, body) || !maps.Equal(ms[0].Metadata, md) {
		t.Fatalf("round trip: %d, %v", len(ms), err)
	}
	if err := q.Delete(ctx, ms[0].ID, ms[0].PopReceipt); err != nil {
		t.Fatal(err)
	}
	// The metadata itself must still fit the message, beside the
	// claim-check envelope: refused before any blob is written.
	before := len(blobs(t, srv, azure.DefaultContainer, uniq(t, "meta-max")+"/"))
	large := map[string]string{}
	for i := range 15 {
		large[fmt.Sprint("k", i)] = strings.Repeat("v", 4000)
	}
	_, err = q.Put(ctx, []byte("small"), queue.PutOptions{Metadata: large})
	var me *queue.MetadataError
	if !errors.As(err, &me) || me.Limit != "body size" {
		t.Fatalf("Put with 60 KB of metadata: %v, want a body-size MetadataError", err)
	}
	if n, _ := q.Count(ctx); n != 0 {
		t.Fatalf("a refused put wrote %d messages", n)
	}
	if bs := blobs(t, srv, azure.DefaultContainer, uniq(t, "meta-max")+"/"); len(bs) != before {
		t.Fatalf("blobs %v after a refused put, want the %d before", bs, before)
	}
}

// claimCheckMetadata is Features().Metadata of a queue with claim-check:
// the metadata does not count against MaxBody.
func claimCheckMetadata() driver.MetadataLimits {
	l := azure.MetadataLimits
	l.InBody = false
	return l
}
