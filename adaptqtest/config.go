package adaptqtest

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/internal/kithook"
	"github.com/adaptq/adaptq/queue"
)

// LoadConfig reads a worker's YAML file as adaptq.LoadConfig does (the
// same file production uses, ADAPTQ_… environment overrides included),
// but swaps each queue's url for memory://NAME before the config is
// validated, NAME being the queue's name key or the name in its URL. The
// production drivers need not be imported; every other key is validated
// as in production, so a test that loads the file catches its mistakes.
func LoadConfig(path string) (adaptq.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return adaptq.Config{}, fmt.Errorf("config: %w", err)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return adaptq.Config{}, fmt.Errorf("config: %w", err)
	}
	v, err := kithook.ParseConfig(path, data, dir, func(_ int, rawURL, name string) (string, error) {
		if name == "" {
			var err error
			if name, err = queueName(rawURL); err != nil {
				return "", err
			}
		}
		return "memory://" + name, nil
	})
	cfg, _ := v.(adaptq.Config)
	return cfg, err
}

// queueName is the name of the queue a URL of one of adaptq's drivers
// opens: the queue parameter (sqlite, postgres, redis), the last segment
// of the path (azure://ACCOUNT/NAME, sqs://REGION/ACCOUNT/NAME), or the
// host of memory://NAME.
func queueName(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("%q is not a URL", queue.Redact(rawURL))
	}
	name := u.Query().Get("queue")
	switch u.Scheme {
	case "memory":
		name = u.Host
		if p := strings.TrimPrefix(u.Path, "/"); p != "" {
			name = p
		}
	case "azure", "sqs":
		name = u.Path[strings.LastIndex(u.Path, "/")+1:]
	}
	if name == "" {
		return "", fmt.Errorf("cannot tell the queue's name from %q: set the queue's name key", queue.Redact(rawURL))
	}
	return name, nil
}
