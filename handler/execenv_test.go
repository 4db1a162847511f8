//go:build unix

package handler_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/queue"
)

// workerSecrets are variables a worker commonly holds that no handler
// program should see unless the operator passes them.
var workerSecrets = map[string]string{
	"ADAPTQ_ADMIN_TOKEN":              "admin-tok-SECRET",
	"ADAPTQ_REDIS_PASSWORD":           "redis-pw-SECRET",
	"AZURE_STORAGE_CONNECTION_STRING": "AccountKey=azure-SECRET",
	"AWS_SECRET_ACCESS_KEY":           "aws-SECRET",
	"HTTPS_PROXY":                     "http://u:proxy-SECRET@proxy:3128",
	"MYAPP_SETTING":                   "not a secret, but not asked for",
}

// printedEnv runs a real child, env(1), under h's options and returns the
// environment it printed, by name.
func printedEnv(t *testing.T, o handler.ExecOptions) map[string]string {
	t.Helper()
	var out bytes.Buffer
	o.Stdout = &out
	h := mustExec(t, []string{"env"}, o)
	if err := h(context.Background(), &queue.Message{ID: "m-1", DequeueCount: 1, Body: nil}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env
}

// By default a command gets the base variables (PATH, HOME, LANG, TZ …)
// and the message's, never the rest of the worker's environment.
func TestExecChildGetsOnlyTheBaseEnvironmentByDefault(t *testing.T) {
	for k, v := range workerSecrets {
		t.Setenv(k, v)
	}
	t.Setenv("TZ", "Europe/Paris")
	t.Setenv("LC_TIME", "C")
	env := printedEnv(t, handler.ExecOptions{Queue: "orders"})
	for k := range workerSecrets {
		if v, ok := env[k]; ok {
			t.Errorf("the child got %s=%s", k, v)
		}
	}
	for _, v := range env {
		if strings.Contains(v, "SECRET") {
			t.Errorf("the child got a secret: %s", v)
		}
	}
	for _, k := range []string{"PATH", "TZ", "LC_TIME", "ADAPTQ_MESSAGE_ID", "ADAPTQ_DEQUEUE_COUNT", "ADAPTQ_QUEUE"} {
		if _, ok := env[k]; !ok {
			t.Errorf("the child lacks %s: %v", k, env)
		}
	}
	if env["ADAPTQ_MESSAGE_ID"] != "m-1" || env["TZ"] != "Europe/Paris" {
		t.Errorf("the child got ADAPTQ_MESSAGE_ID=%q TZ=%q", env["ADAPTQ_MESSAGE_ID"], env["TZ"])
	}
}

// A program's standard error often quotes the URL it failed on: the tail
// an ExitError keeps, which becomes the failure's reason, is redacted.
func TestExecStderrTailIsRedacted(t *testing.T) {
	t.Parallel()
	h := mustExec(t, sh(`echo "PUT https://a.blob.core.windows.net/c?sig=SIGSECRET failed; token=TOKSECRET" >&2; exit 3`), handler.ExecOptions{})
	err := h(context.Background(), &queue.Message{ID: "m", DequeueCount: 1})
	xe, ok := errors.AsType[*handler.ExitError](err)
	if !ok {
		t.Fatalf("err = %v, want an ExitError", err)
	}
	for _, text := range []string{err.Error(), string(xe.Stderr)} {
		if strings.Contains(text, "SIGSECRET") || strings.Contains(text, "TOKSECRET") || !strings.Contains(text, "sig=REDACTED") {
			t.Errorf("%q: want the secrets redacted", text)
		}
	}
}
