package adaptq

import (
	"errors"
	"testing"
	"time"
)

// FuzzParseConfig: any input is either a valid configuration or a
// *ConfigError that names problems; the loader never panics, and what it
// accepts passes New's validation too.
func FuzzParseConfig(f *testing.F) {
	for _, seed := range []string{
		goodQueue,
		"queues: [{url: 'memory://abc', batch_size: 40}]",
		"queues: [{url: 'sqlite://./data/a.db?queue=x1', idle: {min: 1s, max: 2s}, pool: {policy: rules, rules: [{below: 5, tasks: 2}]}}]",
		"log: {level: debug}\nadmin: {address: '127.0.0.1:0'}\nqueues: [{url: 'memory://q1q', handler: 'exec: cat'}]",
		"queues: [{url: 'memory://q1q', visibility_timeout: 30}]",
		"queues: [{url: 'memory://q1q', new_batch_threshold: -1, handler: 'http: http://localhost/x'}]",
		"queues:\n  - url: memory://abc\n    pool:\n      min: 3\n      max: 2\n",
		"{",
		"",
		"queues: 5",
		"queues: [[]]",
		"price_per_10k: 1e400\nqueues: [{url: 'memory://abc'}]",
	} {
		f.Add(seed, "")
		f.Add(seed, "ADAPTQ_QUEUES_0_BATCH_SIZE=8")
	}
	f.Fuzz(func(t *testing.T, yaml, env string) {
		start := time.Now()
		cfg, err := parseConfig("fuzz.yaml", []byte(yaml), []string{env})
		// A hang guard: on a loaded machine, with -race, a parse may take
		// far longer than its usual microseconds.
		if d := time.Since(start); d > 30*time.Second {
			t.Fatalf("parsing took %s: a config must not hang the loader (input %q)", d, yaml)
		}
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || len(ce.Problems) == 0 {
				t.Fatalf("error %v is not a *ConfigError with problems", err)
			}
			return
		}
		if p := cfg.validate(); len(p) > 0 {
			t.Fatalf("accepted a config that validate rejects: %v", p)
		}
		if len(cfg.Queues) == 0 {
			t.Fatal("accepted a config without queues")
		}
	})
}
