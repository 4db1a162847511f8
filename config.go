package adaptq

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/internal/durationhint"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/scaling"
)

// EnvPrefix starts the environment variables that override config keys:
// queues[0].batch_size is ADAPTQ_QUEUES_0_BATCH_SIZE, log.level is
// ADAPTQ_LOG_LEVEL.
const EnvPrefix = "ADAPTQ_"

// Config defaults that are not a listener's or the scaling package's.
const (
	// DefaultLogLevel and DefaultLogFormat: informational logs for people.
	DefaultLogLevel  = "info"
	DefaultLogFormat = "console"
	// DefaultAdminAddress serves stats and triggers on loopback only; a
	// non-loopback address needs admin.token.
	DefaultAdminAddress = "127.0.0.1:8089"
	// DefaultMaxDequeueCount moves a message to the poison queue after five
	// failed runs (Azure Functions' maxDequeueCount).
	DefaultMaxDequeueCount = 5
	// DefaultTargetLatency is the sla policy's pickup-latency target when
	// none is given: half of the default visibility timeout, so that a
	// message waits no longer than it may then be held.
	DefaultTargetLatency = 15 * time.Second
	// PoisonSuffix names a queue's default poison queue (Azure Functions'
	// "<queue>-poison").
	PoisonSuffix = "-poison"
)

// Config describes one worker process: its logs, its admin endpoint, and
// the queues it listens to.
type Config struct {
	Log   LogConfig   `yaml:"log"`
	Admin AdminConfig `yaml:"admin"`
	// PricePer10k prices 10,000 queue calls in dollars for cost reports.
	PricePer10k float64       `yaml:"price_per_10k"`
	Queues      []QueueConfig `yaml:"queues"`
}

// LogConfig sets up zap.
type LogConfig struct {
	Level  string `yaml:"level"`  // debug, info, warn, error
	Format string `yaml:"format"` // console or json
	// Failures rate-limits the lines logged for handler failures, per queue.
	Failures FailureLogConfig `yaml:"failures"`
	// ExecOutput rate-limits the lines of exec: handlers' output logged,
	// per queue.
	ExecOutput ExecOutputLogConfig `yaml:"exec_output"`
}

// ExecOutputLogConfig bounds the info lines a queue's exec: handlers log
// for their programs' output (handler.LogLimit): at most Lines per
// Interval; the lines left out are counted, and one warn line at the end
// of each window says how many. Lines 0 logs every line (a config built
// in code without DefaultConfig gets that).
type ExecOutputLogConfig struct {
	Lines    int           `yaml:"lines"`
	Interval time.Duration `yaml:"interval"`
}

// FailureLogConfig bounds the warn lines a queue's listener writes for
// handler failures, so that a broken downstream does not flood the log:
// at most Lines per Interval, and one line summing up the failures left
// out. Lines 0 logs every failure (a config built in code without
// DefaultConfig gets that).
type FailureLogConfig struct {
	Lines    int           `yaml:"lines"`
	Interval time.Duration `yaml:"interval"`
}

// AdminConfig is the worker's HTTP endpoint for stats (and triggers).
type AdminConfig struct {
	// Address to listen on; empty disables the endpoint.
	Address string `yaml:"address"`
	// Token, if set, must be sent as "Authorization: Bearer TOKEN". An
	// address that is not loopback requires one. It must be at least
	// admin.MinTokenLength (16) characters and no placeholder
	// (admin.CheckToken).
	Token string `yaml:"token"`
	// MaxConnections bounds the connections the endpoint holds open; 0
	// is admin.DefaultMaxConns (64).
	MaxConnections int `yaml:"max_connections"`
}

// QueueConfig is one queue the worker listens to.
type QueueConfig struct {
	// Name of the queue; if empty, the name in the URL.
	Name string `yaml:"name"`
	// URL opens the queue: memory://NAME, sqlite://PATH?queue=NAME, …
	URL string `yaml:"url"`
	// Handler is the name of a registered handler func (default: the
	// queue's name), or "exec: CMD ARGS…", or "http: URL".
	Handler           string        `yaml:"handler"`
	BatchSize         int           `yaml:"batch_size"`
	VisibilityTimeout time.Duration `yaml:"visibility_timeout"`
	// Concurrency bounds the handlers running at once; ConcurrencyAuto
	// ("auto" in YAML) adapts it to the downstream within
	// adaptive_concurrency's bounds (see flowconfig.go).
	Concurrency Concurrency `yaml:"concurrency"`
	// AdaptiveConcurrency bounds an adaptive concurrency (concurrency:
	// auto).
	AdaptiveConcurrency AdaptiveConcurrencyConfig `yaml:"adaptive_concurrency"`
	// RateLimit bounds the messages a second this worker starts.
	RateLimit RateLimitConfig `yaml:"rate_limit"`
	// NewBatchThreshold: get the next batch once this few of the current
	// one are still running; unset means batch_size/2 (Azure Functions'
	// rule), 0 or -1 wait for the whole batch.
	NewBatchThreshold *int `yaml:"new_batch_threshold"`
	// HandlerTimeout bounds one handler call; 0 means no limit.
	HandlerTimeout time.Duration `yaml:"handler_timeout"`
	ShutdownGrace  time.Duration `yaml:"shutdown_grace"`
	// LatencyTarget is the pickup latency the queue accepts; its half paces
	// gets while work trickles in and is the trigger floor, idle.min and
	// idle.delta where those are unset. 0: the backend's default
	// (listener.DefaultLatencyTarget: 200ms where calls are billed, 10ms
	// otherwise).
	LatencyTarget time.Duration `yaml:"latency_target"`
	Idle          IdleConfig    `yaml:"idle"`
	Pool          PoolConfig    `yaml:"pool"`
	// MaxDequeueCount and PoisonQueue: a message failing this many runs
	// moves to the poison queue (default "<name>-poison").
	MaxDequeueCount int    `yaml:"max_dequeue_count"`
	PoisonQueue     string `yaml:"poison_queue"`
	// Trigger lets producers wake the queue's idle listeners.
	Trigger TriggerConfig `yaml:"trigger"`
	// BatchHandler shapes the calls of a batch handler (Worker.HandleBatch):
	// the handler named by handler gets many messages per call. It is
	// only for such a handler. With a batch handler, concurrency counts
	// calls (left out, it is listener.DefaultBatchConcurrency; a number
	// written, 64 included, is that many calls).
	BatchHandler BatchHandlerConfig `yaml:"batch_handler"`
	// PassEnv names the worker's environment variables an exec: handler's
	// program gets besides the base set (handler.ExecBaseEnv: PATH, HOME,
	// LANG, TZ …): names, or prefixes ending in "*". A prefix never passes
	// adaptq's own ADAPTQ_ variables nor the known credentials
	// (handler.ExecSecretEnv); only their exact names do. Nothing else of
	// the worker's environment reaches it.
	PassEnv []string `yaml:"pass_env"`
	// Instances is the policy of the scaling signal (GET /v1/scaling): how
	// many worker instances the queue needs.
	Instances InstancesConfig `yaml:"instances"`

	// concurrencySet: the file (or the environment) wrote concurrency, so
	// that a batch handler's calls are what it says, 64 included; left
	// out, they are listener.DefaultBatchConcurrency (see
	// Worker.newBatchListener). Not a key.
	concurrencySet bool
}

// BatchHandlerConfig is a batch handler's call size and fill wait.
type BatchHandlerConfig struct {
	// Max is the most messages one call gets, 1..listener.MaxBatchMax; 0
	// is listener.DefaultBatchMax (100). A call may hold more than one
	// get's messages: it fills from several gets.
	Max int `yaml:"max"`
	// Wait is the longest the oldest message of a partial call waits for
	// it to fill; 0 starts a call with what the gets have brought as soon
	// as a call may run.
	Wait time.Duration `yaml:"wait"`
}

// set reports whether the queue configures a batch handler's calls.
func (b BatchHandlerConfig) set() bool { return b != BatchHandlerConfig{} }

// InstancesConfig is the policy of the instance-count signal an autoscaler
// reads (GET /v1/scaling, KEDA's metrics-api scaler): enough instances
// that the backlog drains within target_drain_time at the drain rate one
// instance measured over the last minute, or, before a rate is measured,
// one instance per messages_per_instance waiting; clamped to min..max
// (max 0: no limit). messages_per_instance 0 means pool.max ×
// pool.messages_per_task: the backlog at which one instance's
// proportional pool is full.
type InstancesConfig struct {
	TargetDrainTime     time.Duration `yaml:"target_drain_time"`
	MessagesPerInstance int           `yaml:"messages_per_instance"`
	Min                 int           `yaml:"min"`
	Max                 int           `yaml:"max"`
}

// TriggerConfig is a queue's push trigger (the Best Practices article): producers signal
// after they put — Worker.Put does, `adaptq enqueue` does, and any program
// can POST /v1/queues/NAME/trigger to the admin address — and sleeping
// tasks get at once. Idle tasks then stop down to one, which polls only
// every safety_interval.
//
// It is on by default (DefaultQueueConfig): listening costs nothing, and
// with safety_interval unset the idle polling is what it would be without
// a trigger (see QueueConfig.TriggerSafetyInterval), so a producer that
// does not signal waits no longer than before.
type TriggerConfig struct {
	Enabled bool `yaml:"enabled"`
	// SafetyInterval is the longest idle sleep with a trigger; 0 (unset)
	// picks it by the backend (QueueConfig.TriggerSafetyInterval).
	SafetyInterval time.Duration `yaml:"safety_interval"`
}

// TriggerSafetyInterval is the queue's trigger.safety_interval in effect
// on a backend with features f: the configured one, or, unset, idle.max,
// so that polling is what it would be without a trigger, on every backend.
// Even where every put notifies the worker by itself (f.NativeNotify:
// PostgreSQL, Redis, memory) a message that becomes visible without a put
// — a delayed put, a retry, a lease that ran out, a release by a worker
// that stopped — comes with no notification, and only the poll finds it:
// a longer default would make it wait longer than without a trigger.
func (qc QueueConfig) TriggerSafetyInterval(_ driver.Features) time.Duration {
	if qc.Trigger.SafetyInterval > 0 {
		return qc.Trigger.SafetyInterval
	}
	return qc.Idle.Max
}

// IdleConfig is the Best Practices article's idle backoff. Min and Delta unset (0) are
// derived from the latency target: half of it.
type IdleConfig struct {
	Min   time.Duration `yaml:"min"`
	Max   time.Duration `yaml:"max"`
	Delta time.Duration `yaml:"delta"`
}

// PoolConfig sizes the pool of dequeue tasks.
type PoolConfig struct {
	Min     int `yaml:"min"`
	Max     int `yaml:"max"`
	Initial int `yaml:"initial"`
	// Policy is "proportional" (one task per messages_per_task waiting),
	// "rules" (the table in rules, the Best Practices article's by default) or "sla" (enough
	// tasks, from the measured drain rate, that waiting messages are picked
	// up within target_latency).
	Policy          string        `yaml:"policy"`
	TargetLatency   time.Duration `yaml:"target_latency"`
	MessagesPerTask int           `yaml:"messages_per_task"`
	Rules           []RuleConfig  `yaml:"rules"`
	Else            int           `yaml:"else"`
	SampleInterval  time.Duration `yaml:"sample_interval"`
	ShrinkAfter     int           `yaml:"shrink_after"`
}

// RuleConfig is one row of a rules policy: below this depth, this many
// tasks.
type RuleConfig struct {
	Below int `yaml:"below"`
	Tasks int `yaml:"tasks"`
}

// Pool policies.
const (
	PolicyProportional = "proportional"
	PolicyRules        = "rules"
	PolicySLA          = "sla"
)

// DefaultConfig is the configuration with every default and no queues.
func DefaultConfig() Config {
	return Config{
		Log: LogConfig{Level: DefaultLogLevel, Format: DefaultLogFormat,
			Failures:   FailureLogConfig{Lines: listener.DefaultFailureLogLines, Interval: listener.DefaultFailureLogInterval},
			ExecOutput: ExecOutputLogConfig{Lines: handler.DefaultExecOutputLogLines, Interval: handler.DefaultExecOutputLogInterval}},
		Admin:       AdminConfig{Address: DefaultAdminAddress, MaxConnections: admin.DefaultMaxConns},
		PricePer10k: meter.DefaultPricePer10k,
	}
}

// DefaultQueueConfig is a queue's configuration with every default.
func DefaultQueueConfig() QueueConfig {
	rules := make([]RuleConfig, len(scaling.SeedRules.Rules))
	for i, r := range scaling.SeedRules.Rules {
		rules[i] = RuleConfig{Below: r.Below, Tasks: r.Tasks}
	}
	return QueueConfig{
		BatchSize:         listener.DefaultBatchSize,
		VisibilityTimeout: listener.DefaultVisibilityTimeout,
		Concurrency:       listener.DefaultConcurrency,
		ShutdownGrace:     listener.DefaultShutdownGrace,
		Idle:              IdleConfig{Max: scaling.DefaultMaxIdle}, // min, delta: latency_target/2
		Pool: PoolConfig{
			Min: 1, Max: listener.DefaultMaxTasks, Initial: 1,
			Policy:          PolicyProportional,
			TargetLatency:   DefaultTargetLatency,
			MessagesPerTask: scaling.DefaultMessagesPerTask,
			Rules:           rules,
			Else:            scaling.SeedRules.Else,
			SampleInterval:  scaling.DefaultSampleInterval,
			ShrinkAfter:     scaling.DefaultShrinkAfter,
		},
		MaxDequeueCount: DefaultMaxDequeueCount,
		Trigger:         TriggerConfig{Enabled: true}, // safety_interval: by the backend
		Instances:       InstancesConfig{TargetDrainTime: scaling.DefaultTargetDrainTime, Min: scaling.DefaultMinInstances},
	}
}

// ConfigError lists every problem found in a configuration, each naming
// the field path and the value.
type ConfigError struct {
	Source   string
	Problems []string
	// Causes are the errors behind some problems (a driver's, the handler
	// registry's), for errors.Is and errors.As.
	Causes []error
}

// Unwrap returns the causes.
func (e *ConfigError) Unwrap() []error { return e.Causes }

// Error is the one problem on the line of the source ("config FILE:
// queues[0].batch_size: 40 is above 32"), or the count and one problem
// a line. A ConfigError without a Source (the worker's start-up) names
// only the problems.
func (e *ConfigError) Error() string {
	var b strings.Builder
	if e.Source != "" {
		fmt.Fprintf(&b, "config %s: ", e.Source)
	}
	if len(e.Problems) == 1 {
		b.WriteString(e.Problems[0])
		return b.String()
	}
	fmt.Fprintf(&b, "%d problems:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p)
	}
	return b.String()
}

// LoadConfig reads a YAML file, applies ADAPTQ_… environment overrides and
// the defaults, and validates the result. Errors name every bad field.
//
// A relative file path in the file (sqlite://./data/q.db) is relative to
// the file's directory, not to the working directory, so that every
// command that reads the file finds the same database wherever it is run
// from. A path set by an environment variable is relative to the working
// directory, as paths on a command line are.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return parseConfigIn(path, data, os.Environ(), dir)
}

// ParseConfig is LoadConfig for YAML already in memory; source names it in
// errors. Relative paths in it stay relative to the working directory.
func ParseConfig(source string, yaml []byte) (Config, error) {
	return parseConfig(source, yaml, os.Environ())
}

// parseConfig parses data; relative paths in it stay relative to the
// working directory.
func parseConfig(source string, data []byte, environ []string) (Config, error) {
	return parseConfigIn(source, data, environ, "")
}

// parseConfigIn parses data; baseDir, if not empty, is the directory that
// relative paths in data are relative to.
func parseConfigIn(source string, data []byte, environ []string, baseDir string) (Config, error) {
	return parseConfigSwap(source, data, environ, baseDir, nil)
}

// parseConfigSwap is parseConfigIn that, if swap is not nil, replaces each
// queue's url with swap(i, url, name) after the environment's overrides and
// before the config is decoded and validated (the test kit runs a
// production config on memory queues this way).
func parseConfigSwap(source string, data []byte, environ []string, baseDir string, swap func(i int, url, name string) (string, error)) (Config, error) {
	v := viper.New()
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return Config{}, &ConfigError{Source: source, Problems: []string{"not valid YAML: " + yamlProblem(data)}}
	}
	raw := v.AllSettings()
	if baseDir != "" {
		resolvePaths(raw, baseDir)
	}
	problems, fromEnv := applyEnv(raw, environ)
	if swap != nil {
		problems = append(problems, swapURLs(raw, swap)...)
	}
	cfg := DefaultConfig()
	problems = append(problems, decode("", raw, reflect.ValueOf(&cfg).Elem())...)
	if len(problems) == 0 {
		cfg.fillDerived()
		problems = cfg.validate()
	}
	problems = nameEnvOverrides(problems, fromEnv)
	if len(problems) > 0 {
		return cfg, &ConfigError{Source: source, Problems: problems}
	}
	return cfg, nil
}

// maxLocateLines bounds the lines yamlProblem parses prefixes of: a
// config is tens to hundreds of lines (configs/adaptq.yaml: 221), and
// the search parses each prefix.
const maxLocateLines = 1000

// yamlLine is the "line N: " the YAML parser puts before its problem.
var yamlLine = regexp.MustCompile(`^line \d+: `)

// yamlProblem describes the syntax error in data with the line of the
// mistake. The parser (go.yaml.in/yaml/v3, viper's) names the line where
// the enclosing block or list started, counted from 0, when it has one:
// line 1 for a mistake on line 4 of a mapping that starts on line 2. The
// mistake's line is the first whose prefix of the document fails with
// the parser's problem for the whole of it. A prefix cut inside a flow
// list or mapping ([…] or {…}) that spans lines may fail with the same
// problem: then a line before the mistake is named.
func yamlProblem(data []byte) string {
	var n yaml.Node
	err := yaml.Unmarshal(data, &n)
	if err == nil {
		return "the YAML parser refused it" // viper's reader, not the parser
	}
	problem := strings.TrimPrefix(err.Error(), "yaml: ")
	what := yamlLine.ReplaceAllString(problem, "")
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > maxLocateLines {
		return problem
	}
	for k := 1; k <= len(lines); k++ {
		var p yaml.Node
		perr := yaml.Unmarshal(bytes.Join(lines[:k], nil), &p)
		if perr != nil && perr.Error() == err.Error() {
			return fmt.Sprintf("line %d: %s", k, what)
		}
	}
	return problem
}

// fillDerived sets defaults that depend on other fields.
func (c *Config) fillDerived() {
	for i := range c.Queues {
		q := &c.Queues[i]
		if q.Name != "" && q.Handler == "" {
			q.Handler = q.Name
		}
		if q.Name != "" && q.PoisonQueue == "" {
			q.PoisonQueue = q.Name + PoisonSuffix
		}
	}
}

// resolvePaths makes the relative file paths of the queue URLs in raw, as
// the file wrote them, relative to dir. Only the embedded driver's URLs
// hold a file path (sqlite://./rel/x.db, sqlite:rel/x.db); other URLs, and
// values that are not text, are left for validation to judge.
func resolvePaths(raw map[string]any, dir string) {
	items, _ := raw["queues"].([]any)
	for _, it := range items {
		q, ok := it.(map[string]any)
		if !ok {
			continue
		}
		if s, ok := q["url"].(string); ok {
			q["url"] = resolveURL(s, dir)
		}
	}
}

// sqliteScheme is the embedded driver's URL scheme (queue/sqlite.Scheme,
// which this package does not import by name).
const sqliteScheme = "sqlite"

// resolveURL returns rawURL with its relative database path made relative
// to dir, or rawURL unchanged if it has no relative path.
func resolveURL(rawURL, dir string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != sqliteScheme {
		return rawURL
	}
	// As the driver reads it: sqlite://./rel/x.db puts "." in Host,
	// sqlite:rel/x.db is opaque, sqlite:///abs/x.db has an empty Host.
	p := u.Opaque
	if p == "" {
		p = u.Host + u.Path
	}
	if p == "" || filepath.IsAbs(p) || strings.HasPrefix(p, "/") {
		return rawURL
	}
	abs := filepath.ToSlash(filepath.Join(dir, p))
	if strings.HasSuffix(p, "/") {
		abs += "/" // keep a missing file name an error the driver reports
	}
	if !strings.HasPrefix(abs, "/") {
		abs = "/" + abs // a Windows drive letter
	}
	return (&url.URL{Scheme: u.Scheme, Path: abs, RawQuery: u.RawQuery, Fragment: u.Fragment}).String()
}

// envString marks a value that came from the environment: it is text, and
// numbers are parsed from it.
type envString string

// applyEnv overlays ADAPTQ_… variables on the raw settings. A variable
// under a known section that names no key is a problem; others (such as
// ADAPTQ_MESSAGE_ID, set for exec handlers) are not config. It returns the
// problems and, for each key a variable set, the variable's name by the
// key's path (queues[0].batch_size).
func applyEnv(raw map[string]any, environ []string) (problems []string, set map[string]string) {
	set = map[string]string{}
	paths := map[string][]string{}
	collectPaths(reflect.TypeOf(Config{}), nil, raw, paths)
	for _, kv := range environ {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, EnvPrefix) {
			continue
		}
		name := strings.TrimPrefix(k, EnvPrefix)
		path, known := paths[name]
		if !known {
			for _, section := range []string{"LOG_", "ADMIN_", "QUEUES_", "PRICE_"} {
				if strings.HasPrefix(name, section) {
					problems = append(problems, fmt.Sprintf("%s: names no config key (keys are like ADAPTQ_LOG_LEVEL, ADAPTQ_QUEUES_0_BATCH_SIZE)", k))
				}
			}
			continue
		}
		setPath(raw, path, envString(val))
		set[configPath(path)] = k
	}
	return problems, set
}

// configPath writes a key's path as problems name it: queues[0].idle.max.
func configPath(path []string) string {
	var b strings.Builder
	for _, p := range path {
		if _, err := strconv.Atoi(p); err == nil {
			fmt.Fprintf(&b, "[%s]", p)
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}

// nameEnvOverrides makes each problem with a key an environment variable
// set name the variable first: "ADAPTQ_QUEUES_0_BATCH_SIZE
// (queues[0].batch_size): 40 is above 32". The file does not hold the
// value; the variable does.
func nameEnvOverrides(problems []string, set map[string]string) []string {
	for i, p := range problems {
		key, rest, ok := strings.Cut(p, ": ")
		if !ok {
			continue
		}
		if v, ok := set[key]; ok {
			problems[i] = fmt.Sprintf("%s (%s): %s", v, key, rest)
		}
	}
	return problems
}

// collectPaths maps each settable key's environment name to its path.
// List items are addressed by index, for the items the file has.
func collectPaths(t reflect.Type, prefix []string, raw any, out map[string][]string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue // not a key
		}
		key := f.Tag.Get("yaml")
		p := append(append([]string(nil), prefix...), key)
		switch {
		case f.Type.Kind() == reflect.Struct:
			collectPaths(f.Type, p, sub(raw, key), out)
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
			items, _ := sub(raw, key).([]any)
			for j := range items {
				collectPaths(f.Type.Elem(), append(p, strconv.Itoa(j)), items[j], out)
			}
		default:
			out[strings.ToUpper(strings.Join(p, "_"))] = p
		}
	}
}

func sub(raw any, key string) any {
	if m, ok := raw.(map[string]any); ok {
		return m[key]
	}
	return nil
}

// setPath sets raw[path…] = v, creating maps on the way; list indices
// address existing items.
func setPath(raw map[string]any, path []string, v any) {
	var cur any = raw
	for i, key := range path {
		last := i == len(path)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				c[key] = v
				return
			}
			next, ok := c[key]
			if !ok || next == nil {
				if _, err := strconv.Atoi(path[i+1]); err == nil {
					return // a list the file does not have
				}
				next = map[string]any{}
				c[key] = next
			}
			cur = next
		case []any:
			j, _ := strconv.Atoi(key)
			if j >= len(c) {
				return
			}
			if last {
				c[j] = v
				return
			}
			cur = c[j]
		default:
			return
		}
	}
}

var durationType = reflect.TypeOf(time.Duration(0))

// decode sets dst from raw, which came from YAML (or the environment),
// reporting each problem with its path. dst holds defaults; keys absent
// from raw keep them.
func decode(path string, raw any, dst reflect.Value) []string {
	if raw == nil {
		return []string{fmt.Sprintf("%s: has no value", path)}
	}
	t := dst.Type()
	if t.Kind() == reflect.Pointer {
		el := reflect.New(t.Elem())
		if problems := decode(path, raw, el.Elem()); len(problems) > 0 {
			return problems
		}
		dst.Set(el)
		return nil
	}
	bad := func(want string) []string {
		return []string{fmt.Sprintf("%s: %s is not %s", path, show(raw), want)}
	}
	// Text where a mapping or a list belongs (admin: "TOKEN"), or a value
	// where text belongs (token: 123456), may be a secret written one
	// level off: name its kind, never the value.
	hidden := func(want string) []string {
		msg := fmt.Sprintf("%s: %s is not %s", path, kindOf(raw), want)
		switch raw.(type) {
		case map[string]any, []any:
		case string, envString:
			msg += " (the value is not shown: it may be a secret)"
		default:
			msg += " (the value is not shown: it may be a secret; quote it if it is text)"
		}
		return []string{msg}
	}
	switch {
	case t == durationType:
		s, ok := text(raw)
		if !ok {
			return []string{fmt.Sprintf("%s: %s is not a duration: %s", path, show(raw), durationhint.Explain(fmt.Sprint(raw)))}
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return []string{fmt.Sprintf("%s: %q is not a duration: %s", path, s, durationhint.Explain(s))}
		}
		dst.SetInt(int64(d))
	case t == concurrencyType:
		if s, ok := text(raw); ok && strings.TrimSpace(s) == concurrencyAutoText {
			dst.SetInt(int64(ConcurrencyAuto))
			return nil
		}
		if problems := decode(path, raw, reflect.New(reflect.TypeOf(0)).Elem()); len(problems) > 0 {
			return []string{problems[0] + " or " + concurrencyAutoText}
		}
		n := reflect.New(reflect.TypeOf(0)).Elem()
		decode(path, raw, n)
		if n.Int() < 0 {
			// -1 is ConcurrencyAuto's value: written as a number it is a
			// mistake, not "auto".
			return []string{fmt.Sprintf("%s: %d is below 1 (or %s, to adapt it)", path, n.Int(), concurrencyAutoText)}
		}
		dst.SetInt(n.Int())
	case t.Kind() == reflect.Struct:
		m, ok := raw.(map[string]any)
		if !ok {
			return hidden("a mapping")
		}
		return decodeStruct(path, m, dst)
	case t.Kind() == reflect.Slice:
		items, ok := raw.([]any)
		if ev, isEnv := raw.(envString); isEnv && t.Elem().Kind() == reflect.String {
			// A list of names from the environment: A,B,C.
			items, ok = nil, true
			for _, it := range strings.Split(string(ev), ",") {
				if it = strings.TrimSpace(it); it != "" {
					items = append(items, envString(it))
				}
			}
		}
		if !ok {
			return hidden("a list")
		}
		var problems []string
		out := reflect.MakeSlice(t, 0, len(items))
		for i, item := range items {
			el := reflect.New(t.Elem()).Elem()
			if t.Elem() == reflect.TypeOf(QueueConfig{}) {
				el.Set(reflect.ValueOf(DefaultQueueConfig()))
			}
			problems = append(problems, decode(fmt.Sprintf("%s[%d]", path, i), item, el)...)
			if qc, ok := el.Addr().Interface().(*QueueConfig); ok {
				if m, ok := item.(map[string]any); ok {
					_, qc.concurrencySet = m["concurrency"]
				}
			}
			out = reflect.Append(out, el)
		}
		dst.Set(out)
		return problems
	case t.Kind() == reflect.String:
		switch v := raw.(type) {
		case string:
			dst.SetString(v)
		case envString:
			dst.SetString(string(v))
		default:
			return hidden("text")
		}
	case t.Kind() == reflect.Int:
		switch v := raw.(type) {
		case int:
			dst.SetInt(int64(v))
		case int64:
			dst.SetInt(v)
		case uint64:
			dst.SetInt(int64(v))
		case float64: // 1e3 in YAML
			n, ok := wholeNumber(v)
			if !ok {
				return bad("a whole number")
			}
			dst.SetInt(n)
		case envString:
			n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
			if err != nil {
				f, ferr := strconv.ParseFloat(strings.TrimSpace(string(v)), 64)
				var ok bool
				if n, ok = wholeNumber(f); ferr != nil || !ok {
					return bad("a whole number")
				}
			}
			dst.SetInt(n)
		default:
			return bad("a whole number")
		}
	case t.Kind() == reflect.Bool:
		switch v := raw.(type) {
		case bool:
			dst.SetBool(v)
		case envString:
			b, err := strconv.ParseBool(strings.TrimSpace(string(v)))
			if err != nil {
				return bad("true or false")
			}
			dst.SetBool(b)
		default:
			return bad("true or false")
		}
	case t.Kind() == reflect.Float64:
		switch v := raw.(type) {
		case int:
			dst.SetFloat(float64(v))
		case float64:
			dst.SetFloat(v)
		case envString:
			f, err := strconv.ParseFloat(strings.TrimSpace(string(v)), 64)
			if err != nil {
				return bad("a number")
			}
			dst.SetFloat(f)
		default:
			return bad("a number")
		}
	default:
		return []string{fmt.Sprintf("%s: cannot decode into %s", path, t)}
	}
	return nil
}

func decodeStruct(path string, m map[string]any, dst reflect.Value) []string {
	t := dst.Type()
	fields := map[string]int{}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		if !t.Field(i).IsExported() {
			continue // not a key
		}
		k := t.Field(i).Tag.Get("yaml")
		fields[k] = i
		names = append(names, k)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var problems []string
	for _, k := range keys {
		p := k
		if path != "" {
			p = path + "." + k
		}
		i, ok := fields[k]
		if !ok {
			msg := fmt.Sprintf("%s: unknown key", p)
			if s := closest(k, names); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			problems = append(problems, msg)
			continue
		}
		problems = append(problems, decode(p, m[k], dst.Field(i))...)
	}
	return problems
}

// closest returns the known key nearest to k, if it is near enough to be
// a typo.
func closest(k string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(strings.ReplaceAll(k, "-", "_"), n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev = cur
	}
	return prev[len(b)]
}

// wholeNumber is f as an int if it is one (1e3 is 1000), within the range
// a config's counts may take.
func wholeNumber(f float64) (int64, bool) {
	if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

func text(raw any) (string, bool) {
	switch v := raw.(type) {
	case string:
		return v, true
	case envString:
		return string(v), true
	}
	return "", false
}

// kindOf names what a raw value is, without its value.
func kindOf(raw any) string {
	switch raw.(type) {
	case string, envString:
		return "text"
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case bool:
		return "true or false"
	case int, int64, uint64, float64:
		return "a number"
	}
	return "a value"
}

// show renders a raw value for an error message.
func show(raw any) string {
	switch v := raw.(type) {
	case string:
		return strconv.Quote(v)
	case envString:
		return strconv.Quote(string(v))
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return fmt.Sprint(raw)
}

// validate checks ranges and references; every problem names its path and
// value.
func (c *Config) validate() []string {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		add("log.level: %q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "console", "json":
	default:
		add("log.format: %q is not one of console, json", c.Log.Format)
	}
	if f := c.Log.Failures; f.Lines < 0 {
		add("log.failures.lines: %d is negative (0 logs every failure)", f.Lines)
	} else if f.Interval < 0 || (f.Lines > 0 && f.Interval == 0) {
		add("log.failures.interval: %s is not positive", f.Interval)
	}
	if f := c.Log.ExecOutput; f.Lines < 0 {
		add("log.exec_output.lines: %d is negative (0 logs every line)", f.Lines)
	} else if f.Interval < 0 || (f.Lines > 0 && f.Interval == 0) {
		add("log.exec_output.interval: %s is not positive", f.Interval)
	}
	if a := c.Admin.Address; a != "" {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			add("admin.address: %q is not host:port", a)
		} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			add("admin.address: %q has no valid port", a)
		} else if !isLoopback(host) && c.Admin.Token == "" {
			add("admin.address: %q is not a loopback address; set admin.token so that only holders of it can trigger and read the worker", a)
		}
	}
	if c.Admin.Token != "" {
		if err := admin.CheckToken(c.Admin.Token); err != nil {
			add("%s", err.Error())
		}
	}
	if c.Admin.MaxConnections < 0 {
		add("admin.max_connections: %d is negative (0 is the default, %d)", c.Admin.MaxConnections, admin.DefaultMaxConns)
	}
	if c.PricePer10k < 0 {
		add("price_per_10k: %v is negative", c.PricePer10k)
	}
	if len(c.Queues) == 0 {
		add("queues: the worker listens to no queue; add one with a url")
	}
	names := map[string]int{}
	for i := range c.Queues {
		p = append(p, c.Queues[i].validate(fmt.Sprintf("queues[%d]", i))...)
		if n := c.Queues[i].Name; n != "" {
			if j, dup := names[n]; dup {
				add("queues[%d].name: %q is already queues[%d]", i, n, j)
			}
			names[n] = i
		}
	}
	return p
}

func (q *QueueConfig) validate(at string) []string {
	var p []string
	add := func(field, format string, args ...any) {
		p = append(p, fmt.Sprintf("%s.%s: ", at, field)+fmt.Sprintf(format, args...))
	}
	if q.Name != "" {
		if err := queue.ValidateName(q.Name); err != nil {
			add("name", "%v", strings.TrimPrefix(err.Error(), "queue: "))
		}
	}
	if q.URL == "" {
		add("url", "is missing (for example sqlite://./data/adaptq.db?queue=orders)")
	} else if u, err := url.Parse(q.URL); err != nil || u.Scheme == "" {
		add("url", "%q is not a queue URL (want scheme://…, one of %s)", queue.Redact(q.URL), strings.Join(queue.KnownSchemes(), ", "))
	} else if err := queue.CheckScheme(u.Scheme); err != nil {
		// The program did not import the scheme's driver: say which line
		// to add, before anything starts.
		add("url", "%s", strings.TrimPrefix(err.Error(), "queue: "))
	}
	if err := checkHandlerSpec(q.Handler); err != nil {
		add("handler", "%v", err)
	}
	if len(q.PassEnv) > 0 {
		if !strings.HasPrefix(q.Handler, ExecPrefix) {
			add("pass_env", "is for exec: handlers only (handler is %q)", handlerLabel(q.Handler))
		} else if err := handler.CheckPassEnv(q.PassEnv); err != nil {
			add("pass_env", "%s", strings.TrimPrefix(err.Error(), "pass_env "))
		}
	}
	if q.BatchSize < 1 {
		add("batch_size", "%d is below 1", q.BatchSize)
	} else if q.BatchSize > queue.MaxBatchSize {
		add("batch_size", "%d is above %d (the most one get may return)", q.BatchSize, queue.MaxBatchSize)
	}
	if q.VisibilityTimeout <= 0 || q.VisibilityTimeout > queue.MaxVisibilityTimeout {
		add("visibility_timeout", "%s is outside (0s, %s]", q.VisibilityTimeout, queue.MaxVisibilityTimeout)
	}
	p = append(p, q.validateFlow(at)...)
	if t := q.NewBatchThreshold; t != nil {
		if *t < -1 {
			add("new_batch_threshold", "%d is below -1", *t)
		} else if *t >= q.BatchSize && q.BatchSize >= 1 {
			add("new_batch_threshold", "%d is not below batch_size %d", *t, q.BatchSize)
		}
	}
	if q.HandlerTimeout < 0 {
		add("handler_timeout", "%s is negative", q.HandlerTimeout)
	}
	if q.ShutdownGrace < 0 {
		add("shutdown_grace", "%s is negative", q.ShutdownGrace)
	}
	if q.LatencyTarget < 0 {
		add("latency_target", "%s is negative (0 picks the backend's default)", q.LatencyTarget)
	}
	if q.Idle.Min < 0 {
		add("idle.min", "%s is negative", q.Idle.Min)
	}
	if q.Idle.Delta < 0 {
		add("idle.delta", "%s is negative", q.Idle.Delta)
	}
	if q.Idle.Max <= 0 {
		add("idle.max", "%s is not positive", q.Idle.Max)
	} else if q.Idle.Max < q.Idle.Min {
		add("idle.max", "%s is below idle.min %s", q.Idle.Max, q.Idle.Min)
	} else if q.Idle.Min == 0 && q.Idle.Max < q.LatencyTarget/2 {
		add("idle.max", "%s is below idle.min %s (latency_target/2)", q.Idle.Max, q.LatencyTarget/2)
	}
	pl := q.Pool
	if pl.Min < 1 {
		add("pool.min", "%d is below 1", pl.Min)
	}
	if pl.Max < pl.Min {
		add("pool.max", "%d is below pool.min %d", pl.Max, pl.Min)
	}
	if pl.Initial < pl.Min || pl.Initial > pl.Max {
		add("pool.initial", "%d is outside pool.min..pool.max (%d..%d)", pl.Initial, pl.Min, pl.Max)
	}
	switch pl.Policy {
	case PolicyProportional:
		if pl.MessagesPerTask < 1 {
			add("pool.messages_per_task", "%d is below 1", pl.MessagesPerTask)
		}
	case PolicyRules:
		if err := pl.staticRules().Validate(); err != nil {
			add("pool.rules", "%s", strings.TrimPrefix(err.Error(), "scaling: "))
		}
	case PolicySLA:
		if pl.TargetLatency <= 0 {
			add("pool.target_latency", "%s is not positive", pl.TargetLatency)
		}
	default:
		add("pool.policy", "%q is not one of %s, %s, %s", pl.Policy, PolicyProportional, PolicyRules, PolicySLA)
	}
	if pl.SampleInterval <= 0 {
		add("pool.sample_interval", "%s is not positive", pl.SampleInterval)
	}
	if pl.ShrinkAfter < 1 {
		add("pool.shrink_after", "%d is below 1", pl.ShrinkAfter)
	}
	if s := q.Trigger.SafetyInterval; s < 0 {
		add("trigger.safety_interval", "%s is negative (0: picked by the backend)", s)
	} else if s > 0 && s < q.Idle.Max {
		add("trigger.safety_interval", "%s is below idle.max %s", s, q.Idle.Max)
	}
	if q.MaxDequeueCount < 1 {
		add("max_dequeue_count", "%d is below 1", q.MaxDequeueCount)
	}
	if b := q.BatchHandler; b.Max < 0 || b.Max > listener.MaxBatchMax {
		add("batch_handler.max", "%d is outside 1..%d (0: %d)", b.Max, listener.MaxBatchMax, listener.DefaultBatchMax)
	}
	if q.BatchHandler.Wait < 0 {
		add("batch_handler.wait", "%s is negative", q.BatchHandler.Wait)
	}
	if q.BatchHandler.set() && (strings.HasPrefix(q.Handler, ExecPrefix) || strings.HasPrefix(q.Handler, HTTPPrefix)) {
		add("batch_handler", "%s", errNotBatch(q.Handler))
	}
	if t := q.NewBatchThreshold; t != nil && q.BatchHandler.set() {
		add("new_batch_threshold", "%d is set with batch_handler: a batch handler's pool bounds its gets (leave new_batch_threshold out)", *t)
	}
	if q.BatchHandler.set() && q.Concurrency == ConcurrencyAuto {
		add("batch_handler", "is set with concurrency auto: a batch handler's concurrency counts calls and is fixed (set a number)")
	}
	in := q.Instances
	if in.TargetDrainTime <= 0 {
		add("instances.target_drain_time", "%s is not positive", in.TargetDrainTime)
	}
	if in.MessagesPerInstance < 0 {
		add("instances.messages_per_instance", "%d is negative (0: pool.max × pool.messages_per_task)", in.MessagesPerInstance)
	}
	if in.Min < 0 {
		add("instances.min", "%d is negative", in.Min)
	}
	if in.Max < 0 {
		add("instances.max", "%d is negative (0: no limit)", in.Max)
	} else if in.Max > 0 && in.Max < in.Min {
		add("instances.max", "%d is below instances.min %d", in.Max, in.Min)
	}
	if q.PoisonQueue != "" {
		if err := queue.ValidateName(q.PoisonQueue); err != nil {
			add("poison_queue", "%v", strings.TrimPrefix(err.Error(), "queue: "))
		} else if q.PoisonQueue == q.Name {
			add("poison_queue", "%q is the queue itself", q.PoisonQueue)
		}
	}
	return p
}

func (pl PoolConfig) staticRules() scaling.StaticRules {
	r := scaling.StaticRules{Else: pl.Else}
	for _, row := range pl.Rules {
		r.Rules = append(r.Rules, scaling.Rule{Below: row.Below, Tasks: row.Tasks})
	}
	return r
}

// policy returns the pool policy the configuration names; an sla policy
// is stateful, so each call makes a new one.
func (pl PoolConfig) policy() (scaling.Policy, error) {
	switch pl.Policy {
	case PolicyRules:
		return pl.staticRules(), nil
	case PolicySLA:
		p, err := scaling.NewSLA(pl.TargetLatency, scaling.SLAOptions{MinTasks: pl.Min, MaxTasks: pl.Max})
		if err != nil {
			return nil, fmt.Errorf("pool: %w", err)
		}
		return p, nil
	}
	return scaling.Proportional{PerTask: pl.MessagesPerTask}, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Handler spec prefixes: a handler that runs a command or calls a URL.
const (
	ExecPrefix = "exec:"
	HTTPPrefix = "http:"
)

// checkHandlerSpec validates an exec: or http: handler; a plain name is
// checked against the registry at start-up.
func checkHandlerSpec(spec string) error {
	switch {
	case strings.HasPrefix(spec, ExecPrefix):
		if strings.TrimSpace(strings.TrimPrefix(spec, ExecPrefix)) == "" {
			return fmt.Errorf("%q runs no command (want \"exec: CMD ARGS…\")", spec)
		}
	case strings.HasPrefix(spec, HTTPPrefix):
		u := strings.TrimSpace(strings.TrimPrefix(spec, HTTPPrefix))
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			return fmt.Errorf("%q does not name an http or https URL (want \"http: https://host/path\")", HTTPPrefix+" "+queue.Redact(u))
		}
	}
	return nil
}

var errNoHandler = errors.New("no handler registered")

// instances is the queue's instance-count policy, messages_per_instance
// derived from the pool if unset.
func (q QueueConfig) instances() scaling.Instances {
	c := q.Instances
	per := c.MessagesPerInstance
	if per == 0 {
		per = max(q.Pool.Max, 1) * max(q.Pool.MessagesPerTask, 1)
	}
	return scaling.Instances{TargetDrainTime: c.TargetDrainTime, MessagesPerInstance: per, Min: c.Min, Max: c.Max}
}
