package adaptq

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq/queue/driver"
)

const goodQueue = `
queues:
  - name: orders
    url: memory://orders
`

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig("good.yaml", []byte(goodQueue), nil)
	if err != nil {
		t.Fatal(err)
	}
	q := cfg.Queues[0]
	if q.BatchSize != 32 || q.VisibilityTimeout != 30*time.Second || q.Concurrency != 64 || q.NewBatchThreshold != nil {
		t.Errorf("listener defaults: %+v", q)
	}
	// Unset idle.min and idle.delta are latency_target/2, and the target
	// comes from the backend when the queue opens.
	if q.LatencyTarget != 0 || q.Idle.Min != 0 || q.Idle.Max != time.Minute || q.Idle.Delta != 0 {
		t.Errorf("idle defaults: target %s, %+v", q.LatencyTarget, q.Idle)
	}
	if q.Pool.Policy != PolicyProportional || q.Pool.MessagesPerTask != 32 || q.Pool.Min != 1 || q.Pool.Max != 100 {
		t.Errorf("pool defaults: %+v", q.Pool)
	}
	if len(q.Pool.Rules) != 2 || q.Pool.Rules[0] != (RuleConfig{Below: 100, Tasks: 10}) || q.Pool.Else != 100 {
		t.Errorf("rules default to the Best Practices article's table: %+v", q.Pool.Rules)
	}
	if q.Handler != "orders" || q.PoisonQueue != "orders-poison" || q.MaxDequeueCount != 5 {
		t.Errorf("derived defaults: handler %q, poison %q, max dequeue %d", q.Handler, q.PoisonQueue, q.MaxDequeueCount)
	}
	if f := cfg.Log.Failures; f.Lines != 10 || f.Interval != 10*time.Second {
		t.Errorf("log.failures defaults: %+v, want 10 lines per 10s", f)
	}
	if f := cfg.Log.ExecOutput; f.Lines != 10_000 || f.Interval != 10*time.Second {
		t.Errorf("log.exec_output defaults: %+v, want 10000 lines per 10s", f)
	}
	if cfg.Log.Level != "info" || cfg.Admin.Address != DefaultAdminAddress || cfg.PricePer10k != 0.01 {
		t.Errorf("top-level defaults: %+v", cfg)
	}
}

func TestConfigValuesAndEnvironment(t *testing.T) {
	t.Parallel()
	yaml := `
log: {level: debug, format: json}
price_per_10k: 0.004
queues:
  - url: sqlite://./data/x.db?queue=work
    batch_size: 16
    new_batch_threshold: 0
    visibility_timeout: 2m
    idle: {min: 50ms, max: 5m}
    pool: {policy: rules, rules: [{below: 10, tasks: 2}], else: 8, max: 8}
  - name: other
    url: memory://other
`
	env := []string{
		"ADAPTQ_QUEUES_1_BATCH_SIZE=8",
		"ADAPTQ_QUEUES_0_IDLE_MAX=90s",
		"ADAPTQ_LOG_LEVEL=warn",
		"ADAPTQ_MESSAGE_ID=123", // set for exec handlers; not config
	}
	cfg, err := parseConfig("v.yaml", []byte(yaml), env)
	if err != nil {
		t.Fatal(err)
	}
	a, b := cfg.Queues[0], cfg.Queues[1]
	if a.BatchSize != 16 || a.VisibilityTimeout != 2*time.Minute || a.Idle.Min != 50*time.Millisecond {
		t.Errorf("file values: %+v", a)
	}
	if a.NewBatchThreshold == nil || *a.NewBatchThreshold != 0 {
		t.Errorf("explicit new_batch_threshold 0 lost: %v", a.NewBatchThreshold)
	}
	if a.Idle.Max != 90*time.Second || b.BatchSize != 8 || cfg.Log.Level != "warn" {
		t.Errorf("environment overrides: idle.max %s, batch %d, level %s", a.Idle.Max, b.BatchSize, cfg.Log.Level)
	}
	if a.Pool.Policy != PolicyRules || len(a.Pool.Rules) != 1 || a.Pool.Else != 8 || cfg.PricePer10k != 0.004 {
		t.Errorf("pool: %+v, price %v", a.Pool, cfg.PricePer10k)
	}
	if a.Name != "" || a.Handler != "" {
		t.Errorf("name and handler come from the URL at start-up, got %q %q", a.Name, a.Handler)
	}
}

func TestBadConfigsNameTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml string
		env        []string
		want       string
	}{
		{"batch over 32", "queues: [{url: 'memory://a1b', batch_size: 40}]", nil, "queues[0].batch_size: 40 is above 32"},
		{"batch zero", "queues: [{url: 'memory://a1b', batch_size: 0}]", nil, "queues[0].batch_size: 0 is below 1"},
		{"bare number duration", "queues: [{url: 'memory://a1b', visibility_timeout: 30}]", nil, "queues[0].visibility_timeout: 30 is not a duration"},
		{"days are not Go", "queues: [{url: 'memory://a1b', visibility_timeout: '1.00:00:00'}]", nil, `queues[0].visibility_timeout: "1.00:00:00" is not a duration`},
		{"unknown top key", "queue: []\n" + goodQueue, nil, `queue: unknown key (did you mean "queues"?)`},
		{"unknown nested key", "queues: [{url: 'memory://a1b', idle: {maximum: 5s}}]", nil, "queues[0].idle.maximum: unknown key"},
		{"typo suggests", "queues: [{url: 'memory://a1b', batchsize: 4}]", nil, `(did you mean "batch_size"?)`},
		{"missing url", "queues: [{name: orders}]", nil, "queues[0].url: is missing"},
		{"no scheme", "queues: [{url: 'orders'}]", nil, `queues[0].url: "orders" is not a queue URL`},
		{"bad name", "queues: [{name: Orders, url: 'memory://orders'}]", nil, `queues[0].name: invalid queue name "Orders"`},
		{"duplicate", "queues: [{name: abc, url: 'memory://abc'}, {name: abc, url: 'memory://abc'}]", nil, `queues[1].name: "abc" is already queues[0]`},
		{"no queues", "log: {level: info}", nil, "queues: the worker listens to no queue"},
		{"log level", "log: {level: loud}\n" + goodQueue, nil, `log.level: "loud" is not one of`},
		{"threshold", "queues: [{url: 'memory://a1b', batch_size: 8, new_batch_threshold: 8}]", nil, "queues[0].new_batch_threshold: 8 is not below batch_size 8"},
		{"idle order", "queues: [{url: 'memory://a1b', idle: {min: 2m, max: 1m}}]", nil, "queues[0].idle.max: 1m0s is below idle.min 2m0s"},
		{"negative duration", "queues: [{url: 'memory://a1b', shutdown_grace: -5s}]", nil, "queues[0].shutdown_grace: -5s is negative"},
		{"pool order", "queues: [{url: 'memory://a1b', pool: {min: 5, max: 2, initial: 5}}]", nil, "queues[0].pool.max: 2 is below pool.min 5"},
		{"policy", "queues: [{url: 'memory://a1b', pool: {policy: magic}}]", nil, `queues[0].pool.policy: "magic" is not one of`},
		{"rules order", "queues: [{url: 'memory://a1b', pool: {policy: rules, rules: [{below: 100, tasks: 5}, {below: 10, tasks: 9}]}}]", nil, "queues[0].pool.rules: rules[1].below 10 is not above"},
		{"text for number", "queues: [{url: 'memory://a1b', concurrency: many}]", nil, `queues[0].concurrency: "many" is not a whole number`},
		{"list for map", "queues: [{url: 'memory://a1b', idle: [1, 2]}]", nil, "queues[0].idle: a list is not a mapping"},
		{"poison is self", "queues: [{name: abc, url: 'memory://abc', poison_queue: abc}]", nil, `queues[0].poison_queue: "abc" is the queue itself`},
		{"exec without command", "queues: [{url: 'memory://a1b', handler: 'exec:  '}]", nil, `queues[0].handler: "exec:  " runs no command`},
		{"http without URL", "queues: [{url: 'memory://a1b', handler: 'http: ftp://x/y'}]", nil, "queues[0].handler: \"http: ftp://x/y\" does not name an http or https URL"},
		{"public admin without token", "admin: {address: '0.0.0.0:8089'}\n" + goodQueue, nil, `admin.address: "0.0.0.0:8089" is not a loopback address`},
		{"admin not host:port", "admin: {address: 'localhost'}\n" + goodQueue, nil, `admin.address: "localhost" is not host:port`},
		{"short admin token", "admin: {address: '0.0.0.0:8089', token: '1'}\n" + goodQueue, nil, "admin.token: weak admin token: its length is 1, below the minimum of 16 characters"},
		{"placeholder admin token", "admin: {address: '0.0.0.0:8089', token: change-me-change-me}\n" + goodQueue, nil, `admin.token: weak admin token: it contains the word "changeme"`},
		{"blank admin token", "admin: {token: '   '}\n" + goodQueue, nil, "admin.token: weak admin token: it contains whitespace"},
		{"env placeholder admin token", goodQueue, []string{"ADAPTQ_ADMIN_TOKEN=change-me"}, "ADAPTQ_ADMIN_TOKEN (admin.token): weak admin token: its length is 9, below the minimum of 16"},
		{"negative admin connections", "admin: {max_connections: -1}\n" + goodQueue, nil, "admin.max_connections: -1 is negative"},
		{"negative price", "price_per_10k: -1\n" + goodQueue, nil, "price_per_10k: -1 is negative"},
		{"not yaml", "queues: [", nil, "not valid YAML"},
		{"env not a number", goodQueue, []string{"ADAPTQ_QUEUES_0_BATCH_SIZE=lots"}, `ADAPTQ_QUEUES_0_BATCH_SIZE (queues[0].batch_size): "lots" is not a whole number`},
		{"env out of range", goodQueue, []string{"ADAPTQ_QUEUES_0_BATCH_SIZE=40"}, "ADAPTQ_QUEUES_0_BATCH_SIZE (queues[0].batch_size): 40 is above 32"},
		{"env log level", goodQueue, []string{"ADAPTQ_LOG_LEVEL=loud"}, `ADAPTQ_LOG_LEVEL (log.level): "loud" is not one of`},
		{"not whole", "queues: [{url: 'memory://a1b', concurrency: 1.5}]", nil, "queues[0].concurrency: 1.5 is not a whole number"},
		{"days", "queues: [{url: 'memory://a1b', visibility_timeout: 8d}]", nil, `queues[0].visibility_timeout: "8d" is not a duration: Go durations have no days; write "192h"`},
		{"env unknown key", goodQueue, []string{"ADAPTQ_QUEUES_0_BATCHSIZE=4"}, "ADAPTQ_QUEUES_0_BATCHSIZE: names no config key"},
		{"env bad duration", goodQueue, []string{"ADAPTQ_QUEUES_0_VISIBILITY_TIMEOUT=30"}, `ADAPTQ_QUEUES_0_VISIBILITY_TIMEOUT (queues[0].visibility_timeout): "30" is not a duration: a bare number has no unit`},
		{"max dequeue", "queues: [{url: 'memory://a1b', max_dequeue_count: 0}]", nil, "queues[0].max_dequeue_count: 0 is below 1"},
		{"negative latency target", "queues: [{url: 'memory://a1b', latency_target: -1ms}]", nil, "queues[0].latency_target: -1ms is negative"},
		{"idle.max below the derived idle.min", "queues: [{url: 'memory://a1b', latency_target: 10s, idle: {max: 2s}}]", nil, "queues[0].idle.max: 2s is below idle.min 5s (latency_target/2)"},
		{"empty value", "queues: [{url: 'memory://a1b', batch_size: }]", nil, "queues[0].batch_size: has no value"},
		{"instances drain time", "queues: [{url: 'memory://a1b', instances: {target_drain_time: 0s}}]", nil, "queues[0].instances.target_drain_time: 0s is not positive"},
		{"instances order", "queues: [{url: 'memory://a1b', instances: {min: 5, max: 3}}]", nil, "queues[0].instances.max: 3 is below instances.min 5"},
		{"instances negative min", "queues: [{url: 'memory://a1b', instances: {min: -1}}]", nil, "queues[0].instances.min: -1 is negative"},
		{"instances per instance", "queues: [{url: 'memory://a1b', instances: {messages_per_instance: -10}}]", nil, "queues[0].instances.messages_per_instance: -10 is negative"},
		{"env instances max", goodQueue, []string{"ADAPTQ_QUEUES_0_INSTANCES_MAX=-2"}, "ADAPTQ_QUEUES_0_INSTANCES_MAX (queues[0].instances.max): -2 is negative"},
		{"failure lines", "log: {failures: {lines: -1}}\n" + goodQueue, nil, "log.failures.lines: -1 is negative (0 logs every failure)"},
		{"failure interval", "log: {failures: {interval: 0s}}\n" + goodQueue, nil, "log.failures.interval: 0s is not positive"},
		{"negative safety interval", "queues: [{url: 'memory://a1b', trigger: {safety_interval: -1m}}]", nil, "queues[0].trigger.safety_interval: -1m0s is negative (0: picked by the backend)"},
		{"exec output lines", "log: {exec_output: {lines: -1}}\n" + goodQueue, nil, "log.exec_output.lines: -1 is negative (0 logs every line)"},
		{"exec output interval", "log: {exec_output: {interval: 0s}}\n" + goodQueue, nil, "log.exec_output.interval: 0s is not positive"},
		{"env failure interval", goodQueue, []string{"ADAPTQ_LOG_FAILURES_INTERVAL=-1m"}, "ADAPTQ_LOG_FAILURES_INTERVAL (log.failures.interval): -1m0s is not positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseConfig("bad.yaml", []byte(tc.yaml), tc.env)
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error = %v, want a *ConfigError", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, tc.want)
			}
			if !strings.Contains(err.Error(), "bad.yaml") {
				t.Errorf("error does not name the file: %v", err)
			}
		})
	}
}

func TestOneProblemIsOneLine(t *testing.T) {
	t.Parallel()
	_, err := parseConfig("bad.yaml", []byte("queues: [{url: 'memory://a1b', batch_size: 40}]"), nil)
	if got, want := err.Error(), "config bad.yaml: queues[0].batch_size: 40 is above 32 (the most one get may return)"; got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
	_, err = parseConfig("bad.yaml", []byte("queues: [{url: 'memory://a1b', batch_size: 40, concurrency: 0}]"), nil)
	if got := err.Error(); !strings.HasPrefix(got, "config bad.yaml: 2 problems:\n  queues[0]") {
		t.Errorf("error = %q, want the count, then one problem a line", got)
	}
}

func TestWholeNumbersInExponentForm(t *testing.T) {
	t.Parallel()
	cfg, err := parseConfig("e.yaml", []byte("queues: [{url: 'memory://a1b', concurrency: 1e3}]"), []string{"ADAPTQ_QUEUES_0_POOL_MAX=2e2"})
	if err != nil {
		t.Fatal(err)
	}
	if c, m := cfg.Queues[0].Concurrency, cfg.Queues[0].Pool.Max; c != 1000 || m != 200 {
		t.Errorf("concurrency %d, pool.max %d; want 1000 and 200", c, m)
	}
}

// TestRelativePathsAreRelativeToTheConfigFile: a command run from another
// directory opens the database the worker uses, and a path from the
// environment is relative to the working directory, as on a command line.
func TestRelativePathsAreRelativeToTheConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "app", "adaptq.yaml")
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	yaml := `
queues:
  - url: sqlite://./data/x.db?queue=a&busy_timeout=2s
  - url: sqlite:../shared/y.db?queue=b
  - url: sqlite:///abs/z.db?queue=c
  - url: memory://d
  - url: sqlite://./data/x.db?queue=e
`
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ADAPTQ_QUEUES_4_URL", "sqlite://./from-env.db?queue=e")
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	app := filepath.ToSlash(filepath.Dir(path))
	for i, want := range []string{
		"sqlite://" + app + "/data/x.db?queue=a&busy_timeout=2s",
		"sqlite://" + filepath.ToSlash(dir) + "/shared/y.db?queue=b",
		"sqlite:///abs/z.db?queue=c",
		"memory://d",
		"sqlite://./from-env.db?queue=e",
	} {
		if got := cfg.Queues[i].URL; got != want {
			t.Errorf("queues[%d].url = %q, want %q", i, got, want)
		}
	}
}

func TestConfigReportsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := parseConfig("bad.yaml", []byte("queues: [{url: 'memory://a1b', batch_size: 40, concurrency: 0, idle: {delta: -1s}}]"), nil)
	var ce *ConfigError
	if !errors.As(err, &ce) || len(ce.Problems) != 3 {
		t.Fatalf("want 3 problems at once, got %v", err)
	}
}

func TestSecretsStayOutOfConfigErrors(t *testing.T) {
	t.Parallel()
	for _, yaml := range []string{
		"queues: [{url: 'acct/q?sig=SECRETSIG&x=1'}]",                                   // no scheme
		"queues: [{url: 'memory://a1b', handler: 'http: ftp://user:hunter2@ex.com/x'}]", // not http
		"queues: [{url: 'memory://a1b', handler: 'http: https://user:hunter2@ex .com/x'}]",
		"queues: [{url: '::sqlite://x?key=SECRETSIG'}]",
	} {
		_, err := parseConfig("s.yaml", []byte(yaml), nil)
		if err == nil {
			t.Fatalf("%s: want an error", yaml)
		}
		for _, secret := range []string{"SECRETSIG", "hunter2"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error shows the secret %q: %v", secret, err)
			}
		}
	}
}

// A URL whose driver the program did not import fails when the config is
// loaded, and when a worker is made of a config built in code, before
// anything starts: the error names the field, the scheme and, for a driver
// of this module, the import line to add. This test binary imports the
// memory, sqlite and azure drivers only.
func TestConfigNamesTheMissingDriverImport(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, want string }{
		{"redis://127.0.0.1:6379/0?queue=orders", `queues[0].url: no driver for scheme "redis": import _ "github.com/adaptq/adaptq/queue/redis"`},
		{"postgres://127.0.0.1/test?queue=orders", `queues[0].url: no driver for scheme "postgres": import _ "github.com/adaptq/adaptq/queue/postgres"`},
		{"sqs://orders", `queues[0].url: no driver for scheme "sqs": import _ "github.com/adaptq/adaptq/queue/sqs"`},
		{"nosuch://x", `queues[0].url: no driver for scheme "nosuch": its driver's package is not imported (registered: `},
	} {
		_, err := ParseConfig("test.yaml", []byte("queues: [{url: '"+tc.url+"'}]"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(url %s) = %v, want an error containing %q", tc.url, err, tc.want)
		}
		cfg := DefaultConfig()
		qc := DefaultQueueConfig()
		qc.URL = tc.url
		cfg.Queues = []QueueConfig{qc}
		_, err = New(cfg, WithLogger(zap.NewNop()))
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(url %s) = %v, want a ConfigError containing %q", tc.url, err, tc.want)
		}
	}
	// A driver the program imports passes.
	if _, err := ParseConfig("test.yaml", []byte("queues: [{url: 'memory://orders'}]")); err != nil {
		t.Errorf("a memory:// URL with its driver imported: %v", err)
	}
}

// The trigger is on by default, and its safety interval, unset, is
// idle.max, even where every put notifies the worker by itself: messages
// that become visible without a put are found only by the poll (issue 27).
func TestTriggerDefaults(t *testing.T) {
	t.Parallel()
	qc := DefaultQueueConfig()
	if !qc.Trigger.Enabled || qc.Trigger.SafetyInterval != 0 {
		t.Fatalf("trigger defaults %+v, want enabled with safety_interval unset", qc.Trigger)
	}
	for _, tc := range []struct {
		name   string
		mod    func(*QueueConfig)
		native bool
		want   time.Duration
	}{
		{"polled backend", func(*QueueConfig) {}, false, qc.Idle.Max},
		{"native notify", func(*QueueConfig) {}, true, qc.Idle.Max},
		{"native notify, long idle.max", func(q *QueueConfig) { q.Idle.Max = time.Hour }, true, time.Hour},
		{"native notify, no trigger", func(q *QueueConfig) { q.Trigger.Enabled = false }, true, qc.Idle.Max},
		{"configured", func(q *QueueConfig) { q.Trigger.SafetyInterval = 7 * time.Minute }, false, 7 * time.Minute},
	} {
		q := DefaultQueueConfig()
		tc.mod(&q)
		if got := q.TriggerSafetyInterval(driver.Features{NativeNotify: tc.native}); got != tc.want {
			t.Errorf("%s: safety interval %s, want %s", tc.name, got, tc.want)
		}
	}
}
