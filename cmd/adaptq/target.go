package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// Where the config comes from when --config is not given.
const (
	// defaultConfigPath is the repository's reference config, relative to
	// the working directory.
	defaultConfigPath = "configs/adaptq.yaml"
	// configEnv, if set, replaces defaultConfigPath. (It is not a config
	// key, so adaptq.LoadConfig ignores it.)
	configEnv = "ADAPTQ_CONFIG"
)

// defaultConfig is the --config default: $ADAPTQ_CONFIG or
// defaultConfigPath.
func defaultConfig() string {
	v := viper.New()
	_ = v.BindEnv("config", configEnv)
	v.SetDefault("config", defaultConfigPath)
	return v.GetString("config")
}

// target is how a command names its queue: --config and --queue, or --url.
type target struct {
	config string
	queue  string
	url    string
	// create: the command may create the queue's database (enqueue). The
	// others only look at or empty a queue: a database that does not exist
	// is an error, not a new empty file.
	create bool
}

// addFlags registers --config and --queue, and --url if withURL.
func (t *target) addFlags(cmd *cobra.Command, withURL bool) {
	cmd.Flags().StringVarP(&t.config, "config", "c", defaultConfig(), "worker config `FILE` (env "+configEnv+")")
	cmd.Flags().StringVarP(&t.queue, "queue", "q", "", "the queue's `NAME`, as configured or as in its URL (may be left out if the config has one queue)")
	if withURL {
		cmd.Flags().StringVar(&t.url, "url", "", "open the queue at `URL` instead of one from the config (e.g. sqlite://./configs/data/adaptq.db?queue=orders; a relative path is relative to the working directory)")
	}
}

// open opens the queue the flags name. Errors exit 2 when the flags, the
// config or the URL are at fault, 1 otherwise.
func (t *target) open(ctx context.Context, cmd *cobra.Command) (*queue.Queue, error) {
	q, _, err := t.openConfigured(ctx, cmd)
	return q, err
}

// configured is where a queue opened by name came from.
type configured struct {
	cfg adaptq.Config
	// qc is the queue's config; nil for a poison queue, which has none of
	// its own.
	qc *adaptq.QueueConfig
	// index is qc's index in cfg.Queues, -1 for a poison queue.
	index int
}

// openConfigured is open that also returns the config the queue was found
// in (nil with --url).
func (t *target) openConfigured(ctx context.Context, cmd *cobra.Command) (*queue.Queue, *configured, error) {
	if cmd.Flags().Changed("url") {
		if cmd.Flags().Changed("queue") || cmd.Flags().Changed("config") {
			return nil, nil, usageErrorf("give --url, or --config and --queue, not both")
		}
		if t.url == "" {
			return nil, nil, usageErrorf("--url is empty")
		}
		q, err := openURL(ctx, "--url", t.url, t.create)
		if err == nil && inProcess(q) {
			_ = q.Close()
			return nil, nil, errInProcess("--url", t.url)
		}
		return q, nil, err
	}
	cfg, err := loadConfig(t.config, cmd.Flags().Changed("config"))
	if err != nil {
		return nil, nil, err
	}
	q, i, err := findQueue(ctx, cfg, t.config, t.queue, t.create)
	if err != nil {
		return nil, nil, err
	}
	if inProcess(q) {
		_ = q.Close()
		what, u := "--queue "+t.queue, ""
		if i >= 0 {
			what, u = fmt.Sprintf("queues[%d].url", i), cfg.Queues[i].URL
		}
		return nil, nil, errInProcess(what, u)
	}
	c := &configured{cfg: cfg, index: i}
	if i >= 0 {
		c.qc = &cfg.Queues[i]
	}
	return q, c, nil
}

// loadConfig loads a worker config; every problem is an inputError (exit
// 2) that names the field.
func loadConfig(path string, explicit bool) (adaptq.Config, error) {
	cfg, err := adaptq.LoadConfig(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && !explicit {
			return cfg, inputError{fmt.Errorf("%w (the default config is relative to the repository root: pass --config FILE, set %s, or use --url URL)", err, configEnv)}
		}
		return cfg, inputError{err}
	}
	return cfg, nil
}

// openURL opens a queue by URL; what names where the URL came from.
// Unless create, a URL that names a database file that does not exist
// (sqlite://) is an error: the command would create an empty one.
func openURL(ctx context.Context, what, rawURL string, create bool) (*queue.Queue, error) {
	if !create {
		if f := missingFile(rawURL); f != "" {
			return nil, inputErrorf("%s %s: no such file %s (nothing was created; a relative path in a config file is relative to the file's directory)", what, queue.Redact(rawURL), f)
		}
	}
	q, err := queue.Open(ctx, rawURL)
	if err != nil {
		err = fmt.Errorf("%s: %w", what, err)
		if errors.Is(err, queue.ErrInvalidURL) || errors.Is(err, queue.ErrInvalidName) {
			return nil, inputError{err}
		}
		return nil, failure{err}
	}
	return q, nil
}

// missingFile is the database file a sqlite:// URL names if it does not
// exist, else "".
func missingFile(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != sqliteScheme {
		return ""
	}
	f := sqliteFile(u)
	if f == "" {
		return "" // the driver says what is wrong with the URL
	}
	if _, err := os.Stat(f); errors.Is(err, os.ErrNotExist) {
		return f
	}
	return ""
}

// urlQueueName is the name of the queue a URL opens, read from the URL for
// the drivers whose URLs hold it plainly (sqlite://…?queue=NAME,
// memory://NAME), so that finding a queue by name opens no other; ok is
// false for other drivers.
func urlQueueName(rawURL string) (name string, ok bool) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", false
	}
	switch u.Scheme {
	case sqliteScheme:
		return u.Query().Get("queue"), true
	case memoryScheme:
		return u.Host, true
	}
	return "", false
}

// queueName is the name of the queue rawURL opens: from the URL where it
// holds it, else by opening the queue (and closing it again).
func queueName(ctx context.Context, rawURL string) (string, error) {
	if name, ok := urlQueueName(rawURL); ok {
		return name, nil
	}
	q, err := queue.Open(ctx, rawURL)
	if err != nil {
		return "", err
	}
	defer q.Close()
	return q.Name(), nil
}

// findQueue opens the configured queue called name: the queue whose name
// key is name, or else whose URL opens a queue of that name, or else the
// poison queue of that name. An empty name picks the only queue of a
// one-queue config. It returns the index of the queue's config, or -1 for a
// poison queue. Unless create, it creates no database (see openURL).
func findQueue(ctx context.Context, cfg adaptq.Config, source, name string, create bool) (*queue.Queue, int, error) {
	if name == "" {
		if len(cfg.Queues) != 1 {
			return nil, 0, usageErrorf("--queue is required: %s has %d queues (%s)", source, len(cfg.Queues), strings.Join(queueLabels(ctx, cfg), ", "))
		}
		q, err := openURL(ctx, "queues[0].url", cfg.Queues[0].URL, create)
		return q, 0, err
	}
	for i, qc := range cfg.Queues {
		if qc.Name == name {
			q, err := openURL(ctx, fmt.Sprintf("queues[%d].url", i), qc.URL, create)
			return q, i, err
		}
	}
	// A queue without a name key is named by its URL; a poison queue is
	// named by its queue's config.
	for i, qc := range cfg.Queues {
		qname, err := queueName(ctx, qc.URL)
		if err != nil {
			continue
		}
		what := fmt.Sprintf("queues[%d].url", i)
		if qname == name {
			q, err := openURL(ctx, what, qc.URL, create)
			return q, i, err
		}
		if poisonName(qc, qname) == name {
			q, err := openURL(ctx, what, qc.URL, create)
			if err != nil {
				return nil, 0, err
			}
			p, err := q.Sibling(ctx, name)
			_ = q.Close()
			if err != nil {
				return nil, 0, failuref("queues[%d].poison_queue %q: %w", i, name, err)
			}
			return p, -1, nil
		}
	}
	return nil, 0, inputErrorf("--queue %q: no such queue in %s (queues: %s)", name, source, strings.Join(queueLabels(ctx, cfg), ", "))
}

// poisonName is the name of the poison queue of qc, whose queue is called
// name.
func poisonName(qc adaptq.QueueConfig, name string) string {
	if qc.PoisonQueue != "" {
		return qc.PoisonQueue
	}
	return name + adaptq.PoisonSuffix
}

// queueLabels names the configured queues and their poison queues for
// messages: the name key, or the name the URL opens, or else the redacted
// URL.
func queueLabels(ctx context.Context, cfg adaptq.Config) []string {
	var out []string
	for _, qc := range cfg.Queues {
		name := qc.Name
		if name == "" {
			n, err := queueName(ctx, qc.URL)
			if err != nil {
				out = append(out, queue.Redact(qc.URL))
				continue
			}
			name = n
		}
		out = append(out, name, poisonName(qc, name))
	}
	return out
}

// closeQueue closes q, turning a failure into the command's error if it
// has none yet (a durable driver may report a failed flush here).
func closeQueue(q *queue.Queue, err *error) {
	if cerr := q.Close(); cerr != nil && *err == nil {
		*err = failuref("close %s: %w", q.Name(), cerr)
	}
}

// The URL schemes of the in-process driver (queue/memory) and the
// embedded one (queue/sqlite).
const (
	memoryScheme = "memory"
	sqliteScheme = "sqlite"
)

// inProcess reports whether q lives in this process only (memory://):
// nothing this command puts there can reach a worker, and nothing a worker
// holds can be seen from here.
func inProcess(q *queue.Queue) bool {
	return q.Features().Durability == driver.InProcess
}

// errInProcess refuses a command on an in-process queue: it would work on
// a new, empty queue of its own, and a message it put would be lost.
func errInProcess(what, rawURL string) error {
	if rawURL != "" {
		what += " " + queue.Redact(rawURL)
	}
	return inputErrorf("%s: a memory:// queue lives inside one process and ends with it: a message put from here would be lost when this command exits, and nothing a worker holds can be seen from here; use a durable queue the worker shares (sqlite://PATH?queue=NAME), or Worker.Put inside the worker's process", what)
}

// sameQueue reports whether two queue URLs name the same queue: for the
// embedded driver, the same queue in the same file, however the path is
// written; for other drivers, the same URL.
func sameQueue(a, b string) bool {
	if a == b {
		return true
	}
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	if err1 != nil || err2 != nil || ua.Scheme != sqliteScheme || ub.Scheme != sqliteScheme {
		return false
	}
	pa, pb := sqliteFile(ua), sqliteFile(ub)
	na, _ := urlQueueName(a)
	nb, _ := urlQueueName(b)
	return pa != "" && pa == pb && na == nb
}

// sqliteFile is the absolute path of the database file a sqlite:// URL
// names, as the driver reads it ("" if it names none).
func sqliteFile(u *url.URL) string {
	if u.OmitHost && u.Opaque == "" {
		return "" // sqlite:/path: the driver refuses it
	}
	p := u.Opaque
	if p == "" {
		p = u.Host + u.Path
	}
	if p == "" {
		return ""
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return ""
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		abs = filepath.Join(dir, filepath.Base(abs))
	}
	return abs
}
