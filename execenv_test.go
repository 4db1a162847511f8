package adaptq

import (
	"context"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/internal/testutil"
	"github.com/adaptq/adaptq/queue"
)

// An exec: handler's program sees the base variables, what pass_env names
// (in the file, or from ADAPTQ_QUEUES_0_PASS_ENV as A,B) and the message's,
// never the worker's own secrets.
func TestExecHandlerGetsOnlyTheBaseAndPassEnv(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("env(1)")
	}
	t.Setenv("ADAPTQ_ADMIN_TOKEN", "admin-SECRET")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-SECRET")
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "AccountKey=azure-SECRET")
	t.Setenv("BILLING_API_URL", "http://127.0.0.1:9/api")
	t.Setenv("BILLING_MODE", "test")
	t.Setenv("OTHER_VAR", "from the environment override")
	for _, tc := range []struct {
		name, yaml string
		environ    []string
		want       []string
	}{
		{"file", "pass_env: [BILLING_*]", nil, []string{"BILLING_API_URL", "BILLING_MODE"}},
		{"environment", "", []string{"ADAPTQ_QUEUES_0_PASS_ENV=BILLING_MODE, OTHER_VAR"}, []string{"BILLING_MODE", "OTHER_VAR"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := uniqueQueue("env-" + tc.name)
			cfg, err := parseConfig("test.yaml", []byte(`
admin: {address: ""}
queues:
  - url: memory://`+name+`
    handler: "exec: env"
    `+tc.yaml+`
`), tc.environ)
			if err != nil {
				t.Fatal(err)
			}
			out := &testutil.SyncBuffer{}
			w, err := New(cfg, WithLogger(zap.NewNop()), WithExecOutput(out, nil))
			if err != nil {
				t.Fatal(err)
			}
			stop := runWorker(t, w)
			if _, err := w.Put(context.Background(), name, []byte("x"), queue.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "the program ran", func() bool { return strings.Contains(out.String(), "ADAPTQ_MESSAGE_ID=") })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			got := out.String()
			if strings.Contains(got, "SECRET") {
				t.Errorf("the program saw a secret:\n%s", got)
			}
			for _, k := range append(tc.want, "PATH", "ADAPTQ_QUEUE") {
				if !strings.Contains(got, "\n"+k+"=") && !strings.HasPrefix(got, k+"=") {
					t.Errorf("the program lacks %s:\n%s", k, got)
				}
			}
		})
	}
}

func TestPassEnvIsCheckedAndOnlyForExecHandlers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{"queues: [{url: 'memory://a1b', handler: 'http: http://127.0.0.1:9/x', pass_env: [A]}]", "queues[0].pass_env: is for exec: handlers only"},
		{"queues: [{url: 'memory://a1b', handler: 'exec: cat', pass_env: ['*']}]", `queues[0].pass_env: entry "*": name a variable`},
		{"queues: [{url: 'memory://a1b', handler: 'exec: cat', pass_env: ['A=B']}]", `queues[0].pass_env: entry "A=B" is not a variable name`},
	} {
		_, err := parseConfig("s.yaml", []byte(tc.yaml), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
