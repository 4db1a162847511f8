//go:build unix

package handler_test

import (
	"strings"
	"testing"

	"github.com/adaptq/adaptq/handler"
)

// PassEnv passes what it names, exact names and prefixes, credentials
// included when the operator lists them, and nothing else.
func TestExecPassEnvPassesWhatItNames(t *testing.T) {
	for k, v := range workerSecrets {
		t.Setenv(k, v)
	}
	t.Setenv("MYAPP_OTHER", "2")
	env := printedEnv(t, handler.ExecOptions{PassEnv: []string{"MYAPP_*", "AWS_SECRET_ACCESS_KEY"}, Env: []string{"EXTRA=1"}})
	for _, k := range []string{"MYAPP_SETTING", "MYAPP_OTHER", "AWS_SECRET_ACCESS_KEY", "EXTRA", "PATH"} {
		if _, ok := env[k]; !ok {
			t.Errorf("the child lacks %s", k)
		}
	}
	for _, k := range []string{"ADAPTQ_ADMIN_TOKEN", "ADAPTQ_REDIS_PASSWORD", "AZURE_STORAGE_CONNECTION_STRING", "HTTPS_PROXY"} {
		if _, ok := env[k]; ok {
			t.Errorf("the child got %s, which PassEnv does not name", k)
		}
	}
}

func TestExecPassEnvRefusesEverythingAndBadNames(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"*", "", "A=B", "A*B*", "A B"} {
		_, err := handler.Exec([]string{"true"}, handler.ExecOptions{PassEnv: []string{bad}})
		if err == nil || !strings.Contains(err.Error(), "pass_env") {
			t.Errorf("PassEnv %q: err = %v, want a pass_env error", bad, err)
		}
	}
}

// A prefix never passes the worker's own ADAPTQ_ variables nor the
// credentials adaptq knows (Azure, AWS, Redis, PostgreSQL, a proxy URL),
// even when it matches them: "AWS_*" passes AWS_REGION, not
// AWS_SECRET_ACCESS_KEY. A name listed exactly is passed: the operator
// asked for that variable.
func TestExecPassEnvPrefixNeverPassesTheWorkersSecrets(t *testing.T) {
	secrets := map[string]string{
		"ADAPTQ_ADMIN_TOKEN":                "admin-SECRET",
		"ADAPTQ_REDIS_PASSWORD":             "redis-SECRET",
		"ADAPTQ_QUEUES_0_URL":               "redis://:url-SECRET@h:6379",
		"AWS_SECRET_ACCESS_KEY":             "aws-SECRET",
		"AWS_SESSION_TOKEN":                 "aws-session-SECRET",
		"AZURE_STORAGE_CONNECTION_STRING":   "AccountKey=azure-SECRET",
		"AZURE_CLIENT_SECRET":               "azure-client-SECRET",
		"HTTPS_PROXY":                       "http://u:proxy-SECRET@proxy:3128",
		"https_proxy":                       "http://u:proxy-lower-SECRET@proxy:3128",
		"PGPASSWORD":                        "pg-SECRET",
		"REDISCLI_AUTH":                     "rediscli-SECRET",
		"OTEL_EXPORTER_OTLP_HEADERS":        "api-key=otlp-SECRET",
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "Authorization=Bearer%20otlp-traces-SECRET",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AZURE_CLIENT_ID", "client-id")
	t.Setenv("PGHOST", "127.0.0.1")
	t.Setenv("OTEL_SERVICE_NAME", "svc")
	prefixes := []string{"ADAPTQ_*", "AWS_*", "AZURE_*", "HTTPS_*", "https_*", "PG*", "REDIS*", "A*", "OTEL_*"}
	env := printedEnv(t, handler.ExecOptions{PassEnv: prefixes})
	for k := range secrets {
		if v, ok := env[k]; ok {
			t.Errorf("a prefix passed %s=%s", k, v)
		}
	}
	for _, k := range []string{"AWS_REGION", "AZURE_CLIENT_ID", "PGHOST", "OTEL_SERVICE_NAME"} {
		if _, ok := env[k]; !ok {
			t.Errorf("the child lacks %s, which a prefix names and is no secret", k)
		}
	}
	exact := printedEnv(t, handler.ExecOptions{PassEnv: []string{"ADAPTQ_REDIS_PASSWORD", "AWS_*", "PGPASSWORD"}})
	for _, k := range []string{"ADAPTQ_REDIS_PASSWORD", "PGPASSWORD", "AWS_REGION"} {
		if exact[k] == "" {
			t.Errorf("the child lacks %s, named exactly", k)
		}
	}
	for _, k := range []string{"AWS_SECRET_ACCESS_KEY", "ADAPTQ_ADMIN_TOKEN"} {
		if _, ok := exact[k]; ok {
			t.Errorf("the child got %s, which only a prefix matches", k)
		}
	}
}
