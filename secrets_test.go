package adaptq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/internal/testutil"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
)

const topSecret = "c2VjcmV0LWFjY291bnQta2V5"

// A driver whose URLs carry an account key, as azure:// URLs may.
func init() {
	queue.Register("secretq", queue.OpenerFunc(func(_ context.Context, u *url.URL) (driver.Queue, error) {
		if err := queue.CheckParams(u, "key", "sig"); err != nil {
			return nil, err
		}
		if u.Query().Get("key") != topSecret {
			return nil, fmt.Errorf("secretq: %w %q: authentication failed", queue.ErrInvalidURL, queue.Redact(u.String()))
		}
		return memory.Default.Driver(u.Host)
	}))
}

func TestSecretsNeverReachLogsErrorsOrStats(t *testing.T) {
	logs := &testutil.SyncBuffer{}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), logs, zap.DebugLevel))
	cfg := testConfig(t, fmt.Sprintf(`
log: {level: debug}
admin: {address: "127.0.0.1:0"}
queues:
  - url: secretq://secret-q?key=%s
    visibility_timeout: 1s
    max_dequeue_count: 1
    idle: {max: 100ms}
`, topSecret))
	w, err := New(cfg, WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	w.MustHandle("secret-q", func(context.Context, *queue.Message) error { return errors.New("handler failed") })
	stop := runWorker(t, w)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := w.Put(ctx, "secret-q", []byte("x"), queue.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the messages fail and are poisoned", func() bool {
		st := w.Stats(ctx)
		return len(st.Queues) == 1 && st.Queues[0].Failed >= 3
	})
	resp, err := http.Get("http://" + w.AdminAddress() + admin.StatsPath)
	if err != nil {
		t.Fatal(err)
	}
	stats, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// A wrong key: the driver's error names the URL, redacted.
	bad := testConfig(t, "queues: [{url: 'secretq://other-q?key=WRONG"+topSecret+"', handler: 'exec: cat'}]")
	bad.Admin.Address = ""
	wb, err := New(bad, WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	startErr := wb.Run(ctx)
	if startErr == nil {
		t.Fatal("a wrong key started")
	}
	// A config error on the same URL.
	_, cfgErr := parseConfig("s.yaml", []byte("queues: [{url: 'secretq://other-q?key="+topSecret+"', batch_size: 99}]"), []string{"ADAPTQ_QUEUES_0_URL=secretq://x?sig=" + topSecret})

	for what, text := range map[string]string{
		"logs": logs.String(), "stats": string(stats), "start-up error": startErr.Error(), "config error": fmt.Sprint(cfgErr),
	} {
		if strings.Contains(text, topSecret) {
			t.Errorf("the secret appears in the %s:\n%s", what, text)
		}
	}
	if !strings.Contains(logs.String(), "REDACTED") {
		t.Errorf("the logs never mention the queue's URL (redacted); the check proves nothing:\n%s", logs.String())
	}
	if strings.Count(logs.String(), "\n") < 5 {
		t.Errorf("too few log lines to prove anything: %q", logs.String())
	}
}
