package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/queue"
)

// peekJSON peeks with --json and decodes the lines.
func peekJSON(t *testing.T, args ...string) []peekedMessage {
	t.Helper()
	r := mustCLI(t, "", append([]string{"peek", "--json"}, args...)...)
	var out []peekedMessage
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if line == "" {
			continue
		}
		var m peekedMessage
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("peek --json line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func bodyOf(t *testing.T, m peekedMessage) string {
	t.Helper()
	if m.Body != nil {
		return *m.Body
	}
	b, err := base64.StdEncoding.DecodeString(m.BodyBase64)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestEnqueuePeekPurgeRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, baseConfig)
	url := "sqlite://" + dir + "/q.db?queue=orders"

	r := mustCLI(t, "", "enqueue", "--config", cfg, "--queue", "orders", "hello")
	if !strings.HasPrefix(r.stdout, "put 1 message to orders in ") || !strings.Contains(r.stdout, ": id ") {
		t.Errorf("summary of one put: %q", r.stdout)
	}
	r = mustCLI(t, "", "enqueue", "-c", cfg, "--count", "20", "again")
	if !strings.HasPrefix(r.stdout, "put 20 messages to orders in ") || strings.Contains(r.stdout, "id ") || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("summary of 20 puts: %q", r.stdout)
	}
	binary := []byte{0, 1, 2, 0xff, 'x'}
	file := filepath.Join(dir, "body.bin")
	if err := os.WriteFile(file, binary, 0o600); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, "", "enqueue", "-c", cfg, "--file", file)
	mustCLI(t, "line one\nline two\n", "enqueue", "--url", url, "-")
	mustCLI(t, "", "enqueue", "--url", url, "--ttl", "never", "forever")
	mustCLI(t, "", "enqueue", "--url", url, "--delay", "1h", "hidden")

	if n := queueDepthOf(t, url); n != 25 {
		t.Fatalf("depth %d, want 25", n)
	}
	msgs := peekJSON(t, "-c", cfg, "-n", "32")
	if len(msgs) != 24 {
		t.Fatalf("peek shows %d messages, want the 24 visible ones", len(msgs))
	}
	var bodies []string
	for _, m := range msgs {
		bodies = append(bodies, bodyOf(t, m))
		if m.DequeueCount != 0 || m.ID == "" || m.Size != len(bodyOf(t, m)) || m.InsertedAt.IsZero() {
			t.Errorf("peeked %+v", m)
		}
		switch body := bodyOf(t, m); {
		case body == "forever" && m.ExpiresAt != nil:
			t.Errorf("--ttl never: expires %v", m.ExpiresAt)
		case body != "forever" && (m.ExpiresAt == nil || m.ExpiresAt.Sub(m.InsertedAt) != queue.DefaultTTL):
			t.Errorf("default ttl: inserted %v, expires %v", m.InsertedAt, m.ExpiresAt)
		case body == string(binary) && (m.Body != nil || m.BodyBase64 == ""):
			t.Errorf("binary body not in body_base64: %+v", m)
		}
	}
	for _, want := range []string{"hello", "again", string(binary), "line one\nline two\n", "forever"} {
		if !slices.Contains(bodies, want) {
			t.Errorf("peek lacks body %q", want)
		}
	}
	if c := strings.Count(strings.Join(bodies, "|"), "again"); c != 20 {
		t.Errorf("%d copies of the --count body, want 20", c)
	}

	// The human format: text bodies as text, others as base64.
	r = mustCLI(t, "", "peek", "-c", cfg, "-n", "32")
	for _, want := range []string{"  hello\n", "  line one\n  line two\n", "base64: " + base64.StdEncoding.EncodeToString(binary), "expires never", "dequeued 0"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("peek output lacks %q:\n%s", want, r.stdout)
		}
	}

	r = cli(t, "", "purge", "-c", cfg)
	if r.code != exitUsage || !strings.Contains(r.stderr, "would delete 25 messages") || !strings.Contains(r.stderr, "--yes") {
		t.Errorf("purge without --yes: exit %d, %s", r.code, r.stderr)
	}
	if n := queueDepthOf(t, url); n != 25 {
		t.Fatalf("purge without --yes left %d messages, want 25", n)
	}
	r = mustCLI(t, "", "purge", "-c", cfg, "--yes")
	if !strings.Contains(r.stdout, "25 messages deleted") {
		t.Errorf("purge: %q", r.stdout)
	}
	if n := queueDepthOf(t, url); n != 0 {
		t.Errorf("after purge: depth %d", n)
	}
	r = mustCLI(t, "", "peek", "--url", url)
	if r.stdout != "orders: no visible messages\n" {
		t.Errorf("peek of an empty queue: %q", r.stdout)
	}
}

func TestEnqueueLines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, baseConfig)
	r := mustCLI(t, "alpha\r\nbeta\n\ngamma", "enqueue", "-c", cfg, "--lines", "--count", "2", "-")
	if !strings.HasPrefix(r.stdout, "put 6 messages to orders") {
		t.Errorf("summary: %q", r.stdout)
	}
	var bodies []string
	for _, m := range peekJSON(t, "-c", cfg, "-n", "32") {
		bodies = append(bodies, bodyOf(t, m))
	}
	slices.Sort(bodies)
	if want := []string{"alpha", "alpha", "beta", "beta", "gamma", "gamma"}; !slices.Equal(bodies, want) {
		t.Errorf("bodies %q, want %q", bodies, want)
	}
	file := filepath.Join(dir, "lines.txt")
	if err := os.WriteFile(file, []byte("one\ntwo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = mustCLI(t, "", "enqueue", "-c", cfg, "--lines", "--file", file)
	if !strings.HasPrefix(r.stdout, "put 2 messages") {
		t.Errorf("summary: %q", r.stdout)
	}
}

func TestPeekChangesNoDequeueCount(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, baseConfig)
	url := "sqlite://" + dir + "/q.db?queue=orders"
	mustCLI(t, "", "enqueue", "-c", cfg, "--count", "3", "m")

	// Deliver one message twice (got, released), so counts differ.
	ctx := context.Background()
	q, err := queue.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for range 2 {
		got, err := q.Get(ctx, 1, time.Minute)
		if err != nil || len(got) != 1 {
			t.Fatalf("get: %v, %d", err, len(got))
		}
		if _, err := q.UpdateVisibility(ctx, got[0].ID, got[0].PopReceipt, 0); err != nil {
			t.Fatal(err)
		}
	}
	counts := func() map[string]int {
		c := map[string]int{}
		for _, m := range peekJSON(t, "--url", url) {
			c[m.ID] = m.DequeueCount
		}
		return c
	}
	first := counts()
	for range 3 {
		mustCLI(t, "", "peek", "--url", url)
	}
	if again := counts(); len(first) != 3 || !mapsEqual(first, again) {
		t.Fatalf("dequeue counts changed across peeks: %v, then %v", first, again)
	}
	sum := 0
	for _, n := range first {
		sum += n
	}
	if sum != 2 {
		t.Errorf("dequeue counts %v, want them to add up to the 2 gets", first)
	}
	// The next get sees the count one past what peek showed.
	got, err := q.Get(ctx, 3, time.Minute)
	if err != nil || len(got) != 3 {
		t.Fatalf("get: %v, %d", err, len(got))
	}
	for _, m := range got {
		if m.DequeueCount != first[m.ID]+1 {
			t.Errorf("message %s: dequeue count %d after peeks showed %d", m.ID, m.DequeueCount, first[m.ID])
		}
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestEnqueueProgressOnATerminal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, baseConfig)
	var out, errOut testutil.SyncBuffer
	e := env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, terminal: true}
	if code := runContext(context.Background(), e, []string{"enqueue", "-c", cfg, "--count", "3000", "p"}); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	// Whatever progress was drawn is erased; the summary is the last line.
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	last := lines[len(lines)-1]
	if i := strings.LastIndex(last, "\r\033[K"); i >= 0 {
		last = last[i+len("\r\033[K"):]
	}
	if len(lines) != 1 || !strings.HasPrefix(last, "put 3000 messages to orders in ") {
		t.Errorf("output %q", out.String())
	}
	if n := queueDepthOf(t, "sqlite://"+dir+"/q.db?queue=orders"); n != 3000 {
		t.Errorf("depth %d", n)
	}
}

func TestPoisonQueueByName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := writeConfig(t, dir, baseConfig)
	mustCLI(t, "", "enqueue", "-c", cfg, "-q", "orders-poison", "bad one")
	if msgs := peekJSON(t, "-c", cfg, "-q", "orders-poison"); len(msgs) != 1 || bodyOf(t, msgs[0]) != "bad one" {
		t.Errorf("peek of the poison queue: %+v", msgs)
	}
	if n := queueDepthOf(t, "sqlite://"+dir+"/q.db?queue=orders"); n != 0 {
		t.Errorf("the message went to orders too: depth %d", n)
	}
	if got := depthTable(mustCLI(t, "", "stats", "-c", cfg).stdout); got["orders-poison"] != "1" || got["orders"] != "0" {
		t.Errorf("stats: %v", got)
	}
	mustCLI(t, "", "purge", "-c", cfg, "-q", "orders-poison", "--yes")
	if n := queueDepthOf(t, "sqlite://"+dir+"/q.db?queue=orders-poison"); n != 0 {
		t.Errorf("after purge: depth %d", n)
	}
}
