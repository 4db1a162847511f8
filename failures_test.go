package adaptq

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/queue"
)

// The messages of the log lines these tests look for.
const (
	logFailed   = "listener: handler failed; the message will run again"
	logSummary  = "listener: more handler failures than the log's rate limit; these were not logged"
	logExecLine = "handler: exec output"
)

// logEntries parses a JSON log: each line must be a JSON object.
func logEntries(t *testing.T, out *testutil.SyncBuffer) []map[string]any {
	t.Helper()
	var es []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e map[string]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		es = append(es, e)
	}
	return es
}

// withMsg returns the entries whose message is msg.
func withMsg(es []map[string]any, msg string) []map[string]any {
	var out []map[string]any
	for _, e := range es {
		if e["msg"] == msg {
			out = append(out, e)
		}
	}
	return out
}

// A failing exec: handler is visible at the default level: its output
// lines and its failure carry the message id as JSON fields.
func TestExecFailureIsLoggedWithTheMessageID(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("exec: sh")
	}
	// A name of its own per run: a message that failed in an earlier run
	// (-count=2) is visible again in the process-wide memory store.
	name := uniqueQueue("fail-exec")
	cfg := testConfig(t, `
log: {level: info, format: json}
admin: {address: ""}
queues:
  - url: memory://`+name+`
    handler: "exec: sh -c 'echo \"working on $ADAPTQ_MESSAGE_ID\"; echo downstream said no >&2; printf partial; exit 3'"
`)
	out := &testutil.SyncBuffer{}
	log, err := NewLoggerTo(cfg.Log, out)
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(cfg, WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	stop := runWorker(t, w)
	id, err := w.Put(context.Background(), name, []byte("job"), queue.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the failure is logged", func() bool { return len(withMsg(logEntries(t, out), logFailed)) > 0 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	es := logEntries(t, out)
	f := withMsg(es, logFailed)[0]
	reason, _ := f["error"].(string)
	if f["level"] != "warn" || f["msg_id"] != id || f["dequeue_count"] != 1.0 || f["queue"] != name ||
		f["exit_code"] != 3.0 || !strings.Contains(reason, "exit status 3") || !strings.Contains(reason, "downstream said no") {
		t.Errorf("failure line %v: want warn, msg_id %s, dequeue_count 1, queue %s, exit_code 3, an error with exit status 3 and the stderr tail", f, id, name)
	}
	want := map[string]string{"working on " + id: "stdout", "downstream said no": "stderr", "partial": "stdout"}
	lines := withMsg(es, logExecLine)
	for _, e := range lines {
		line, _ := e["line"].(string)
		if want[line] != e["stream"] || e["msg_id"] != id || e["queue"] != name || e["dequeue_count"] != 1.0 || e["level"] != "info" {
			t.Errorf("output line %v: want it from %q with msg_id %s, queue and dequeue_count", e, want[line], id)
		}
		delete(want, line)
	}
	if len(want) > 0 {
		t.Errorf("output lines not logged: %v (logged: %v)", want, lines)
	}
}

// An http: handler's failure names the status or the transport error, and
// never the URL's password or secret query values.
func TestHTTPFailureReasonIsClearAndRedacted(t *testing.T) {
	t.Parallel()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	// A port nothing listens on: connection refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()
	q503, qRefused := uniqueQueue("fail-503"), uniqueQueue("fail-refused")
	secretURL := func(hostport string) string {
		return "http://hook:pa55word@" + hostport + "/hook?token=t0ken&id=7"
	}
	cfg := testConfig(t, `
admin: {address: ""}
queues:
  - url: memory://`+q503+`
    handler: "http: `+secretURL(strings.TrimPrefix(down.URL, "http://"))+`"
  - url: memory://`+qRefused+`
    handler: "http: `+secretURL(refused)+`"
`)
	core, logs := observer.New(zap.InfoLevel)
	w, err := New(cfg, WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	stop := runWorker(t, w)
	ids := map[string]string{}
	for _, q := range []string{q503, qRefused} {
		if ids[q], err = w.Put(context.Background(), q, []byte("job"), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "both failures are logged", func() bool { return logs.FilterMessage(logFailed).Len() == 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, e := range logs.All() {
		for _, secret := range []string{"pa55word", "t0ken"} {
			if strings.Contains(e.Message, secret) || strings.Contains(fmtFields(e), secret) {
				t.Errorf("a secret of the URL is logged: %s %v", e.Message, e.ContextMap())
			}
		}
	}
	for q, want := range map[string][]string{
		q503:     {"503 Service Unavailable", "maintenance", "token=REDACTED"},
		qRefused: {"connection refused", "token=REDACTED"},
	} {
		got := logs.FilterMessage(logFailed).FilterField(zap.String("queue", q)).All()
		if len(got) != 1 {
			t.Fatalf("%d failure lines for %s", len(got), q)
		}
		f := got[0].ContextMap()
		reason, _ := f["error"].(string)
		for _, s := range want {
			if !strings.Contains(reason, s) {
				t.Errorf("%s: reason %q lacks %q", q, reason, s)
			}
		}
		if f["msg_id"] != ids[q] {
			t.Errorf("%s: msg_id %v, want %s", q, f["msg_id"], ids[q])
		}
		if code, has := f["status_code"]; (q == q503) != has || (has && code != int64(503)) {
			t.Errorf("%s: status_code %v", q, code)
		}
	}
}

// fmtFields renders an entry's fields as text, to search them.
func fmtFields(e observer.LoggedEntry) string {
	b, _ := json.Marshal(e.ContextMap())
	return string(b)
}

// Each queue has its own budget of failure lines, and the failures left
// out are summed up when the worker stops.
func TestFailureLinesAreRateLimitedPerQueue(t *testing.T) {
	t.Parallel()
	qa, qb := uniqueQueue("burst-a"), uniqueQueue("burst-b")
	cfg := testConfig(t, `
log: {failures: {lines: 2, interval: 1h}}
admin: {address: ""}
queues:
  - {url: memory://`+qa+`, handler: broken}
  - {url: memory://`+qb+`, handler: broken}
`)
	core, logs := observer.New(zap.InfoLevel)
	w, err := New(cfg, WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	w.MustHandle("broken", func(context.Context, *queue.Message) error { return errors.New("downstream is down") })
	stop := runWorker(t, w)
	const n = 30
	for _, q := range []string{qa, qb} {
		for range n {
			if _, err := w.Put(context.Background(), q, []byte("job"), queue.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A failure still in flight when the worker stops is handed back, not
	// logged: wait until every failure is settled.
	settled := func(q string) bool {
		l, ok := w.Listener(q)
		if !ok {
			return false
		}
		st, err := l.State(context.Background())
		return err == nil && l.Stats().Failed == n && st.InFlight == 0
	}
	waitUntil(t, "every message fails", func() bool { return settled(qa) && settled(qb) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{qa, qb} {
		of := logs.FilterField(zap.String("queue", q))
		if got := of.FilterMessage(logFailed).Len(); got != 2 {
			t.Errorf("%s: %d failure lines, want 2", q, got)
		}
		s := of.FilterMessage(logSummary).All()
		if len(s) != 1 || s[0].ContextMap()["not_logged"] != int64(n-2) {
			t.Errorf("%s: summaries %v, want one with not_logged %d", q, s, n-2)
		}
	}
}
