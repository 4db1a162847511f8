package azure

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/adaptq/adaptq/queue/driver"
)

// The metadata envelope. Azure Queue Storage keeps no metadata beside a
// message, so a message put with metadata carries it in front of its body:
// one line of JSON, a newline, then the body's bytes as they are (or the
// claim-check envelope of a body stored as a blob), the whole encoded as
// any body is (base64 or text):
//
//	{"adaptq":"metadata/v1","size":5,"metadata":{"tenant":"t1"}}\nhello
//
// size is the length of what follows the newline, so a body that only
// looks like an envelope (a wrong size, other fields, no newline) is read
// as the body it is. A message put without metadata is written exactly as
// before, unless its body itself starts with the envelope's first bytes:
// such a body is enveloped with no metadata, so that it comes back as it
// went.
type metaHeader struct {
	Version  string            `json:"adaptq"`
	Size     int               `json:"size"`
	Metadata map[string]string `json:"metadata"`
}

const metaVersion = "metadata/v1"

var metaPrefix = []byte(`{"adaptq":"` + metaVersion + `"`)

// MetadataLimits are Azure's for a message's metadata: the engines'
// count, key and value limits, and the envelope's line counts against the
// 64 KiB message (Features().Metadata.InBody, without claim-check; with
// it a body that does not fit beside its metadata goes to a blob, and
// only the metadata must fit the message). Put checks the exact size of
// the envelope, whose JSON may escape a value's quotes, backslashes and
// control characters; PairOverhead is what each pair costs at least (two
// quoted strings, a colon and a comma).
var MetadataLimits = driver.MetadataLimits{
	MaxPairs: driver.DefaultMetadataPairs, MaxKey: driver.MaxMetadataKey, MaxValue: driver.DefaultMetadataValue,
	InBody: true, PairOverhead: 6,
}

// needsMetaEnvelope reports whether a Put of body with md is enveloped.
func needsMetaEnvelope(body []byte, md map[string]string) bool {
	return len(md) > 0 || bytes.HasPrefix(body, metaPrefix)
}

// metaLine is the envelope's first line, newline included, for md in front
// of size bytes.
func metaLine(md map[string]string, size int) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if md == nil {
		md = map[string]string{}
	}
	_ = enc.Encode(metaHeader{Version: metaVersion, Size: size, Metadata: md}) // strings always encode
	return b.Bytes()
}

// openMetaEnvelope splits a message's bytes into its metadata (nil for
// none) and body. Bytes that are not a well-formed envelope are the body,
// whole.
func openMetaEnvelope(b []byte) (map[string]string, []byte) {
	if !bytes.HasPrefix(b, metaPrefix) {
		return nil, b
	}
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 {
		return nil, b
	}
	var h metaHeader
	dec := json.NewDecoder(bytes.NewReader(b[:nl]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil || dec.More() || h.Version != metaVersion || h.Size != len(b)-nl-1 || h.Metadata == nil {
		return nil, b
	}
	for k := range h.Metadata {
		if !driver.ValidMetadataKey(k) {
			return nil, b
		}
	}
	body := b[nl+1:]
	if len(h.Metadata) == 0 {
		return nil, body
	}
	return h.Metadata, body
}

// metaSizeError is the error of metadata whose envelope does not fit a
// message beside what it carries: got bytes for a limit of max.
func metaSizeError(got, max int) error {
	return &driver.MetadataError{Limit: "body size", Max: max, Got: got}
}

// claimCheckSize is the length of the claim-check envelope storePayload
// would write for a body of size bytes: its blob name has a fixed length.
func (q *Queue) claimCheckSize(size int) int {
	env, _ := json.Marshal(envelope{Version: envelopeVersion, Container: q.a.cfg.Container, Blob: q.name + "/" + strings.Repeat("0", 32), Size: size})
	return len(env)
}

var _ driver.MetadataFitter = (*Queue)(nil)

// FitMetadata implements driver.MetadataFitter with Put's own size checks:
// a body that goes in the message as it is must fit it with md's envelope
// in front (else Put would fail, or move it to a claim-check blob), and
// the claim-check envelope of one that goes to a blob must fit it too.
func (q *Queue) FitMetadata(body []byte, md map[string]string) error {
	if !needsMetaEnvelope(body, md) {
		return nil
	}
	limit := q.a.cfg.Encoding.inlineLimit()
	if len(body) <= limit && !isEnvelope(body) {
		if n := len(metaLine(md, len(body))) + len(body); n > limit {
			return metaSizeError(n, limit)
		}
		return nil
	}
	cc := q.claimCheckSize(len(body))
	if n := len(metaLine(md, cc)) + cc; n > limit {
		return metaSizeError(n, limit)
	}
	return nil
}
