package queuetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
)

// putBatch calls PutBatch and fails the test on a whole-call error or a
// result count that does not match.
func (e *env) putBatch(t *testing.T, q *queue.Queue, msgs []queue.PutMessage) []queue.PutResult {
	t.Helper()
	res, err := q.PutBatch(e.ctx, msgs)
	if err != nil {
		t.Fatalf("PutBatch of %d: %v", len(msgs), err)
	}
	if len(res) != len(msgs) {
		t.Fatalf("PutBatch of %d returned %d results", len(msgs), len(res))
	}
	return res
}

// drainAll gets every visible message of q (up to want+1 of them) and
// deletes none: bodies by id.
func (e *env) drainAll(t *testing.T, q *queue.Queue, want int) map[string][]byte {
	t.Helper()
	got := map[string][]byte{}
	for id, m := range e.drainMessages(t, q, want) {
		got[id] = m.Body
	}
	return got
}

// drainMessages is drainAll with the whole messages, metadata included.
func (e *env) drainMessages(t *testing.T, q *queue.Queue, want int) map[string]*queue.Message {
	t.Helper()
	got := map[string]*queue.Message{}
	for empty := 0; len(got) <= want && empty < 2; {
		ms := e.get(t, q, e.batch(), 600*unit) // held until the end: none got twice
		if len(ms) == 0 {
			empty++ // a backend with approximate order may answer one short get
			continue
		}
		for _, m := range ms {
			if _, dup := got[m.ID]; dup {
				t.Fatalf("message %s got twice within its visibility timeout", m.ID)
			}
			got[m.ID] = m
		}
	}
	return got
}

// testPutBatchSizes: a batch of 1, of the driver's batch limit and of one
// more stores every message once, under distinct ids, one result each, in
// order.
func testPutBatchSizes(t *testing.T, e *env) {
	for _, n := range []int{1, e.batch(), e.batch() + 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			q := e.open(t, fmt.Sprintf("put-batch-%d", n))
			msgs := make([]queue.PutMessage, n)
			for i := range msgs {
				msgs[i] = queue.PutMessage{Body: []byte(fmt.Sprintf("batch-%d-%d", n, i)), Opts: queue.PutOptions{TTL: time.Hour}}
			}
			res := e.putBatch(t, q, msgs)
			want := map[string]string{}
			for i, r := range res {
				if r.Err != nil || r.ID == "" {
					t.Fatalf("message %d: id %q, error %v", i, r.ID, r.Err)
				}
				if _, dup := want[r.ID]; dup {
					t.Fatalf("message %d: id %q given twice", i, r.ID)
				}
				want[r.ID] = string(msgs[i].Body)
			}
			got := e.drainAll(t, q, n)
			if len(got) != n {
				t.Fatalf("got %d messages back, want %d", len(got), n)
			}
			for id, b := range got {
				if want[id] != string(b) {
					t.Errorf("message %s: body %q, PutBatch stored %q under it", id, b, want[id])
				}
			}
		})
	}
}

// testPutBatchMixed: invalid messages in a batch fail alone, with an error
// that names their field and value; nothing is written for them and every
// valid message is stored with its own options.
func testPutBatchMixed(t *testing.T, e *env) {
	q := e.open(t, "put-batch-mixed")
	tooLarge := bytes.Repeat([]byte{'x'}, e.maxBody()+1)
	type tc struct {
		msg  queue.PutMessage
		err  error  // nil: valid
		word string // the error names it
	}
	cases := []tc{
		{msg: queue.PutMessage{Body: []byte("ok-0")}},
		{msg: queue.PutMessage{Body: tooLarge}, err: queue.ErrTooLarge, word: fmt.Sprint(e.maxBody() + 1)},
		{msg: queue.PutMessage{Body: []byte("ok-2"), Opts: queue.PutOptions{TTL: time.Hour}}},
		{msg: queue.PutMessage{Body: []byte("bad-ttl"), Opts: queue.PutOptions{TTL: -5 * time.Second}}, err: queue.ErrInvalidArgument, word: "ttl -5s"},
		{msg: queue.PutMessage{Body: []byte("bad-delay"), Opts: queue.PutOptions{TTL: time.Minute, InitialVisibilityDelay: time.Minute}}, err: queue.ErrInvalidArgument, word: "delay 1m0s"},
		{msg: queue.PutMessage{Body: []byte("delayed"), Opts: queue.PutOptions{InitialVisibilityDelay: 60 * unit}}},
		{msg: queue.PutMessage{Body: []byte{}}},
	}
	// Past the batch limit, so that the valid messages span two calls.
	for i := len(cases); i <= e.batch(); i++ {
		cases = append(cases, tc{msg: queue.PutMessage{Body: []byte(fmt.Sprint("ok-", i))}})
	}
	msgs := make([]queue.PutMessage, len(cases))
	for i, c := range cases {
		msgs[i] = c.msg
	}
	res := e.putBatch(t, q, msgs)
	want := map[string]string{}
	valid := 0
	for i, c := range cases {
		r := res[i]
		if c.err != nil {
			if !errors.Is(r.Err, c.err) || r.ID != "" {
				t.Errorf("message %d: id %q, error %v; want %v and no id", i, r.ID, r.Err, c.err)
			} else if msg := r.Err.Error(); !strings.Contains(msg, c.word) || !strings.Contains(msg, fmt.Sprint("message ", i)) {
				t.Errorf("message %d: error %q does not name message %d and %q", i, msg, i, c.word)
			}
			continue
		}
		valid++
		if r.Err != nil || r.ID == "" {
			t.Fatalf("message %d (valid): id %q, error %v", i, r.ID, r.Err)
		}
		if string(c.msg.Body) != "delayed" {
			want[r.ID] = string(c.msg.Body)
		}
	}
	if n := e.count(t, q); n != valid {
		t.Errorf("Count = %d after a batch of %d valid messages", n, valid)
	}
	got := e.drainAll(t, q, len(want))
	if len(got) != len(want) {
		t.Fatalf("got %d messages back, want the %d valid ones not delayed", len(got), len(want))
	}
	for id, b := range got {
		w, ok := want[id]
		if !ok || w != string(b) {
			t.Errorf("got message %s %q, want one of the valid ones put visible", id, b)
		}
	}
}

// testPutBatchLargeBodies: a batch of bodies of a third of the size limit
// each, more than one backend call may carry where the driver bounds a
// call's bytes (SQS: a SendMessageBatch is at most 1 MiB in all, so two
// such bodies a call), is stored whole, every body intact.
func testPutBatchLargeBodies(t *testing.T, e *env) {
	q := e.open(t, "put-batch-large")
	n := e.batch()
	size := e.maxBody() / 3
	if e.f.MaxBatchBytes == 0 {
		size = min(size, 32<<10) // no call limit to cross: keep it cheap (Azure's limit is 64 MiB)
	}
	msgs := make([]queue.PutMessage, n)
	for i := range msgs {
		b := bytes.Repeat([]byte{0xFE, byte(i)}, size/2+1) // not text: the widest encoding
		msgs[i] = queue.PutMessage{Body: b[:size]}
	}
	res := e.putBatch(t, q, msgs)
	want := map[string]int{}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("message %d: %v", i, r.Err)
		}
		want[r.ID] = i
	}
	got := e.drainAll(t, q, n)
	ids := make([]string, 0, len(got))
	for id := range got {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if len(got) != n {
		t.Fatalf("got %d messages back, want %d", len(got), n)
	}
	for _, id := range ids {
		i, ok := want[id]
		if !ok || !bytes.Equal(got[id], msgs[i].Body) {
			t.Fatalf("message %s: body of %d bytes does not match the one put under its id", id, len(got[id]))
		}
	}
}

// testPutBatchWakes: a batch put wakes a subscriber (NativeNotify).
func testPutBatchWakes(t *testing.T, e *env) {
	if !e.f.NativeNotify {
		t.Skip("the driver's Features say it has no native notify")
	}
	q := e.open(t, "put-batch-wakes")
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	sig, err := q.Subscribe(ctx)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	other := e.open(t, "put-batch-wakes")
	msgs := make([]queue.PutMessage, e.batch())
	for i := range msgs {
		msgs[i].Body = []byte(fmt.Sprint("wake-", i))
	}
	e.putBatch(t, other, msgs)
	select {
	case <-sig:
	case <-time.After(30 * time.Second): // a guard against a hang only
		t.Fatal("no signal within 30 s of a batch put")
	}
}

// testLostReplyPutBatch: a PutBatch whose reply is lost after the server
// stored its messages fails transiently for each message it could not
// confirm and leaves at most one copy of each; a message that returned an
// id left exactly one message with it.
func testLostReplyPutBatch(t *testing.T, e *faultEnv) {
	name := e.name("lost-batch")
	q := e.open(t, name)
	d := e.direct(t, name)
	e.warm(t, q)
	// Ready the batch path (a script to load, a statement to prepare), so
	// that the lost reply is the batch's own.
	if res, err := q.PutBatch(e.ctx, []queue.PutMessage{{Body: []byte("warm-batch")}}); err != nil || res[0].Err != nil {
		t.Fatalf("PutBatch with no fault: %v, %v", res, err)
	}
	ids := map[string]string{} // body → id, for the messages that returned one
	var failed []string        // bodies of the messages that failed
	for i := 0; i < faultTries && len(failed) == 0; i++ {
		msgs := make([]queue.PutMessage, 3)
		for k := range msgs {
			msgs[k].Body = []byte(fmt.Sprintf("lost-batch-%d-%d", i, k))
		}
		before := e.h.Proxy.Counts()
		e.h.Proxy.LoseReplies(e.attempts())
		res, err := q.PutBatch(e.ctx, msgs)
		e.h.Proxy.LoseReplies(0)
		if err != nil {
			t.Fatalf("PutBatch refused as a whole: %v", err)
		}
		for k, r := range res {
			if r.Err == nil {
				ids[string(msgs[k].Body)] = r.ID
				continue
			}
			if !queue.IsTransient(r.Err) {
				t.Fatalf("message %d of a PutBatch whose reply was lost failed with %v, which is not transient: the caller cannot know to retry", k, r.Err)
			}
			landed(t, e.h.Proxy, before)
			failed = append(failed, string(msgs[k].Body))
		}
	}
	if len(failed) == 0 {
		t.Fatalf("no PutBatch failed in %d tries with a reply lost each time", faultTries)
	}
	seen := map[string][]string{} // body → ids stored
	for _, m := range e.all(t, d) {
		seen[string(m.Body)] = append(seen[string(m.Body)], m.ID)
	}
	for body, id := range ids {
		if got := seen[body]; len(got) != 1 || got[0] != id {
			t.Errorf("PutBatch gave %q id %s; the server holds %v", body, id, got)
		}
	}
	for _, body := range failed {
		if got := seen[body]; len(got) > 1 {
			t.Errorf("a message (%q) of a PutBatch whose reply was lost left %d messages %v: never duplicated under a new id", body, len(got), got)
		}
	}
}

// testPutBatchMetadata: PutBatch stores each message's metadata as Put
// does, in a batch of more than one backend call, and Get returns it; a
// message put with none (nil or empty) has none; the caller's changes to
// its maps after PutBatch touch nothing stored. A message whose metadata
// breaks the rules fails alone with a *MetadataError that names its place
// and the key, and nothing is written for it.
func testPutBatchMetadata(t *testing.T, e *env) {
	q := e.open(t, "put-batch-metadata")
	if e.f.Metadata.MaxPairs == 0 {
		res := e.putBatch(t, q, []queue.PutMessage{{Body: []byte("plain")}, {Body: []byte("m"), Opts: queue.PutOptions{Metadata: map[string]string{"k": "v"}}}})
		wantErr(t, "PutBatch with metadata on a driver without it", res[1].Err, queue.ErrInvalidMetadata)
		if res[0].Err != nil {
			t.Fatalf("the message without metadata: %v", res[0].Err)
		}
		if n := e.count(t, q); n != 1 {
			t.Fatalf("Count = %d, want 1 (nothing written for the refused message)", n)
		}
		t.Skip("the driver's Features say it stores no metadata")
	}
	base := metadataSample()
	for len(base) > e.f.Metadata.MaxPairs-1 { // room for "seq"
		for k := range base {
			delete(base, k)
			break
		}
	}
	const bad = 2
	n := e.batch() + 1 // two backend calls where the driver batches
	msgs := make([]queue.PutMessage, n)
	want := make([]map[string]string, n)
	for i := range msgs {
		msgs[i].Body = []byte(fmt.Sprint("md-", i))
		switch i % 3 {
		case 0:
			md := maps.Clone(base)
			md["seq"] = fmt.Sprint(i)
			msgs[i].Opts.Metadata, want[i] = md, maps.Clone(md)
		case 2:
			msgs[i].Opts.Metadata = map[string]string{} // empty: none
		}
	}
	msgs[bad].Opts.Metadata = map[string]string{"seq": "2", "a b": "v"}
	res := e.putBatch(t, q, msgs)
	for _, m := range msgs {
		for k := range m.Opts.Metadata {
			m.Opts.Metadata[k] = "changed by the caller after PutBatch"
		}
	}
	byID := map[string]int{}
	for i, r := range res {
		if i == bad {
			var me *queue.MetadataError
			if !errors.As(r.Err, &me) || !errors.Is(r.Err, queue.ErrInvalidMetadata) || me.Key != "a b" || me.Limit != "key characters" ||
				r.ID != "" || !strings.Contains(r.Err.Error(), fmt.Sprint("message ", bad)) {
				t.Fatalf("message %d (bad metadata): id %q, error %v; want a *MetadataError naming message %d and key %q", i, r.ID, r.Err, bad, "a b")
			}
			continue
		}
		if r.Err != nil || r.ID == "" {
			t.Fatalf("message %d: id %q, error %v", i, r.ID, r.Err)
		}
		byID[r.ID] = i
	}
	if c := e.count(t, q); c != n-1 {
		t.Errorf("Count = %d, want %d (nothing written for the refused message)", c, n-1)
	}
	got := e.drainMessages(t, q, n-1)
	if len(got) != n-1 {
		t.Fatalf("got %d messages back, want %d", len(got), n-1)
	}
	for id, m := range got {
		i, ok := byID[id]
		if !ok || string(m.Body) != fmt.Sprint("md-", i) {
			t.Fatalf("got message %s %q, not one PutBatch stored under that id", id, m.Body)
		}
		if !maps.Equal(m.Metadata, want[i]) || (want[i] == nil) != (m.Metadata == nil) {
			t.Errorf("message %d: metadata %q, want %q", i, m.Metadata, want[i])
		}
	}
}

// testPutBatchLargeMetadata: a full batch of large bodies, each with 8 KiB
// of metadata, is stored whole, every body and its metadata intact. The
// bodies alone fill one backend call where the driver bounds a call's
// bytes: where metadata counts against the message size (SQS's
// attributes), the batch must be split by bodies and metadata together to
// fit.
func testPutBatchLargeMetadata(t *testing.T, e *env) {
	lim := e.f.Metadata
	e.need(t, lim.MaxPairs > 0, "metadata", nil)
	q := e.open(t, "put-batch-large-metadata")
	n := e.batch()
	// No call limit to cross: keep it cheap, and within Azure's message
	// with the metadata (which stays in the message).
	size := min(e.maxBody()/3, 16<<10)
	if e.f.MaxBatchBytes > 0 {
		size = e.f.MaxBatchBytes / n
	}
	pairs := min(lim.MaxPairs, 8)
	value := 1 << 10
	if lim.MaxValue > 0 {
		value = min(value, lim.MaxValue)
	}
	if lim.InBody {
		value = min(value, (e.maxBody()-size)/(2*pairs)) // with room for keys and encoding
	}
	msgs := make([]queue.PutMessage, n)
	for i := range msgs {
		b := bytes.Repeat([]byte{0xFE, byte(i)}, size/2+1) // not text: the widest encoding
		md := map[string]string{}
		for j := range pairs {
			md[fmt.Sprintf("k%02d", j)] = strings.Repeat(string(rune('a'+(i+j)%26)), value)
		}
		msgs[i] = queue.PutMessage{Body: b[:size], Opts: queue.PutOptions{Metadata: md}}
	}
	res := e.putBatch(t, q, msgs)
	want := map[string]int{}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("message %d (a %d-byte body, %d pairs of %d-byte values): %v", i, size, pairs, value, r.Err)
		}
		want[r.ID] = i
	}
	got := e.drainMessages(t, q, n)
	if len(got) != n {
		t.Fatalf("got %d messages back, want %d", len(got), n)
	}
	for id, m := range got {
		i, ok := want[id]
		if !ok || !bytes.Equal(m.Body, msgs[i].Body) || !maps.Equal(m.Metadata, msgs[i].Opts.Metadata) {
			t.Fatalf("message %s: a %d-byte body with %d pairs does not match the one put under its id", id, len(m.Body), len(m.Metadata))
		}
	}
}
