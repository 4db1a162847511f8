package main

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/adaptq/adaptq"
)

// Issue 27, item 4: a worker run from the reference config, idle, handles
// a message that `adaptq enqueue` puts at once, not at its next poll: the
// trigger is on by default and enqueue pulls it. Here the idle sleep is an
// hour (idle.min = idle.max = 1h), so a message handled within the test's
// wait (at most minutes) was handled because of the trigger.
func TestReferenceConfigHandlesAnEnqueuedMessageAtOnce(t *testing.T) {
	dir := t.TempDir()
	// The reference config as it is, but for its database, its idle sleep
	// and a free port for the admin endpoint.
	t.Setenv("ADAPTQ_QUEUES_0_URL", "sqlite://"+dir+"/adaptq.db?queue=orders")
	t.Setenv("ADAPTQ_QUEUES_0_IDLE_MIN", "1h")
	t.Setenv("ADAPTQ_QUEUES_0_IDLE_MAX", "1h")
	t.Setenv("ADAPTQ_ADMIN_ADDRESS", "127.0.0.1:0")
	cfg, err := adaptq.LoadConfig(referenceConfig)
	if err != nil {
		t.Fatal(err)
	}
	w, err := adaptq.New(cfg, adaptq.WithLogger(zap.NewNop()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-w.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	l, _ := w.Listener("orders")
	waitUntil(t, "the worker's task sleeps its hour", func() bool {
		st, err := l.State(context.Background())
		return err == nil && st.IdleTasks == 1 && l.Stats().EmptyGets > 0
	})

	t.Setenv("ADAPTQ_ADMIN_ADDRESS", w.AdminAddress())
	r := mustCLI(t, "", "enqueue", "--config", referenceConfig, "--queue", "orders", "order 1001")
	if !strings.HasSuffix(r.stdout, "; worker triggered\n") {
		t.Errorf("enqueue says %q, want it to say the worker was triggered", r.stdout)
	}
	waitUntil(t, "the message is handled long before the hour's sleep ends", func() bool {
		return l.Stats().Processed == 1
	})
}
