package sqs_test

import (
	"context"
	"net/url"
	"os/exec"
	"testing"
	"time"

	"github.com/adaptq/adaptq"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/sqs"
	"github.com/adaptq/adaptq/queue/sqs/sqstest"
)

const exampleConfig = "../../configs/sqs.yaml"

// configs/sqs.yaml loads, names an SQS queue, and a worker built from it
// (its URL pointed at the emulator, as ADAPTQ_QUEUES_0_URL would) handles
// a message with its exec: handler.
func TestExampleConfig(t *testing.T) {
	t.Parallel()
	cfg, err := adaptq.LoadConfig(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Queues) != 1 {
		t.Fatalf("%d queues", len(cfg.Queues))
	}
	u, err := url.Parse(cfg.Queues[0].URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := sqs.ConfigFromURL(u); err != nil {
		t.Fatalf("the example's URL: %v", err)
	}
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh for the example's exec: handler")
	}

	srv := sqstest.Shared(t)
	region := sqstest.NewRegion()
	cfg.Queues[0].URL = srv.URL(region, "orders")
	cfg.Admin.Address = ""
	cfg.Log.Level = "error"
	w, err := adaptq.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	q, err := queue.Open(ctx, srv.URL(region, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.Put(ctx, []byte("order 1001"), queue.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(time.Minute); ; {
		n, err := q.Count(ctx)
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the message is still queued after a minute (count %d, %v)", n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
