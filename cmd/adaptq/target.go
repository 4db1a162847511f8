package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/queue"
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
}

// addFlags registers --config and --queue, and --url if withURL.
func (t *target) addFlags(cmd *cobra.Command, withURL bool) {
	cmd.Flags().StringVarP(&t.config, "config", "c", defaultConfig(), "worker config `FILE` (env "+configEnv+")")
	cmd.Flags().StringVarP(&t.queue, "queue", "q", "", "the queue's `NAME`, as configured or as in its URL (may be left out if the config has one queue)")
	if withURL {
		cmd.Flags().StringVar(&t.url, "url", "", "open the queue at `URL` instead of one from the config (e.g. sqlite://./data/adaptq.db?queue=orders)")
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
		q, err := openURL(ctx, "--url", t.url)
		return q, nil, err
	}
	cfg, err := loadConfig(t.config, cmd.Flags().Changed("config"))
	if err != nil {
		return nil, nil, err
	}
	q, i, err := findQueue(ctx, cfg, t.config, t.queue)
	if err != nil {
		return nil, nil, err
	}
	c := &configured{cfg: cfg}
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
func openURL(ctx context.Context, what, rawURL string) (*queue.Queue, error) {
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

// findQueue opens the configured queue called name: the queue whose name
// key is name, or else whose URL opens a queue of that name, or else the
// poison queue of that name. An empty name picks the only queue of a
// one-queue config. It returns the index of the queue's config, or -1 for a
// poison queue.
func findQueue(ctx context.Context, cfg adaptq.Config, source, name string) (*queue.Queue, int, error) {
	if name == "" {
		if len(cfg.Queues) != 1 {
			return nil, 0, usageErrorf("--queue is required: %s has %d queues (%s)", source, len(cfg.Queues), strings.Join(queueLabels(ctx, cfg), ", "))
		}
		q, err := openURL(ctx, "queues[0].url", cfg.Queues[0].URL)
		return q, 0, err
	}
	for i, qc := range cfg.Queues {
		if qc.Name == name {
			q, err := openURL(ctx, fmt.Sprintf("queues[%d].url", i), qc.URL)
			return q, i, err
		}
	}
	// A queue without a name key is named by its URL; a poison queue is
	// named by its queue's config. Opening is how to read a URL's name for
	// any driver (cheap for sqlite:// and memory://).
	for i, qc := range cfg.Queues {
		q, err := queue.Open(ctx, qc.URL)
		if err != nil {
			continue
		}
		if q.Name() == name {
			return q, i, nil
		}
		if poisonName(qc, q.Name()) == name {
			p, err := q.Sibling(ctx, name)
			_ = q.Close()
			if err != nil {
				return nil, 0, failuref("queues[%d].poison_queue %q: %w", i, name, err)
			}
			return p, -1, nil
		}
		_ = q.Close()
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
			q, err := queue.Open(ctx, qc.URL)
			if err != nil {
				out = append(out, queue.Redact(qc.URL))
				continue
			}
			name = q.Name()
			_ = q.Close()
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
