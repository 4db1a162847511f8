//go:build unix

package adaptq

import (
	"context"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/adaptq/adaptq/queue"
)

// log.exec_output reaches the exec: handlers: a queue logs at most lines
// of its programs' output per interval, and the worker's stop sums up
// those left out.
func TestExecOutputLogLimitFromTheConfig(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("exec-output")
	cfg, err := parseConfig("test.yaml", []byte(`
admin: {address: ""}
log: {exec_output: {lines: 2, interval: 1h}}
queues:
  - url: memory://`+name+`
    handler: "exec: sh -c 'echo one; echo two; echo three'"
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	w, err := New(cfg, WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	stop := runWorker(t, w)
	if _, err := w.Put(context.Background(), name, []byte("x"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	l, _ := w.Listener(name)
	waitUntil(t, "the message was handled", func() bool { return l.Stats().Processed == 1 })
	mfs, err := w.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var notLogged float64 = -1
	for _, mf := range mfs {
		if mf.GetName() == "adaptq_exec_output_lines_not_logged_total" {
			for _, m := range mf.GetMetric() {
				notLogged = m.GetCounter().GetValue()
			}
		}
	}
	if notLogged != 1 {
		t.Errorf("adaptq_exec_output_lines_not_logged_total = %v, want 1", notLogged)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessage("handler: exec output").Len(); n != 2 {
		t.Errorf("%d output lines logged, want 2", n)
	}
	s := logs.FilterMessage("handler: exec output over the log's rate limit; these lines were not logged").All()
	if len(s) != 1 || s[0].ContextMap()["not_logged"] != int64(1) || s[0].ContextMap()["queue"] != name {
		t.Errorf("summaries %v, want one of queue %s with not_logged 1", s, name)
	}
}
