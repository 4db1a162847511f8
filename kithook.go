package adaptq

import (
	"fmt"
	"os"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/internal/kithook"
)

// The test kit (package adaptqtest) runs a worker on its virtual clock and
// loads a production config onto memory queues through these hooks.
func init() {
	kithook.WorkerClock = func(c clock.Clock) any { return withClock(c) }
	kithook.ParseConfig = func(source string, data []byte, baseDir string, swap func(i int, url, name string) (string, error)) (any, error) {
		return parseConfigSwap(source, data, os.Environ(), baseDir, swap)
	}
}

// swapURLs replaces the url of each queue in raw (as YAML and the
// environment set it) with swap's answer; a queue with no url, or one
// whose url or name is not text, is left for validation to name.
func swapURLs(raw map[string]any, swap func(i int, url, name string) (string, error)) []string {
	items, _ := raw["queues"].([]any)
	var problems []string
	for i, item := range items {
		q, ok := item.(map[string]any)
		if !ok {
			continue
		}
		u, ok := text(q["url"])
		if !ok {
			continue
		}
		name, _ := text(q["name"])
		nu, err := swap(i, u, name)
		if err != nil {
			problems = append(problems, fmt.Sprintf("queues[%d].url: %v", i, err))
			continue
		}
		q["url"] = nu
	}
	return problems
}
