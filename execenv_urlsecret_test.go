//go:build unix

package adaptq

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/queue"
)

// A queue URL that names a credential's variable (Azure's key_env=) makes
// that variable a secret for exec handlers: pass_env's prefix "QUEUE_*"
// passes QUEUE_REGION, never QUEUE_KEY (review of issue 26: the key
// reached the child).
func TestExecPassEnvPrefixNeverPassesAVariableAQueueURLNames(t *testing.T) {
	t.Setenv("QUEUE_KEY", "azure-key-SECRET")
	t.Setenv("QUEUE_REGION", "westeurope")
	cfg, err := parseConfig("test.yaml", []byte(`
admin: {address: ""}
queues:
  - url: memory://urlsecret-exec
    handler: "exec: env"
    pass_env: ["QUEUE_*"]
  - url: azure://devstoreaccount1/orders?key_env=QUEUE_KEY&endpoint=http://127.0.0.1:9
    handler: other
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := &testutil.SyncBuffer{}
	w, err := New(cfg, WithLogger(zap.NewNop()), WithExecOutput(out, nil))
	if err != nil {
		t.Fatal(err)
	}
	h, err := w.handlerFor(cfg.Queues[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := h(context.Background(), &queue.Message{ID: "m1", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if strings.Contains(got, "SECRET") {
		t.Errorf("the program saw the key a queue URL names:\n%s", got)
	}
	if !strings.Contains(got, "QUEUE_REGION=westeurope") {
		t.Errorf("the program lacks QUEUE_REGION, which the prefix names and no URL does:\n%s", got)
	}
}
