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
