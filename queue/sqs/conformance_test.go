package sqs_test

import (
	"context"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/queuetest"
	"github.com/adaptq/adaptq/queue/sqs"
	"github.com/adaptq/adaptq/queue/sqs/sqstest"
)

// features are what the driver promises on a queue it created.
var features = driver.Features{
	MaxBatch: sqs.MaxBatch, MaxBody: (sqs.MaxMessageSize - 256) / 4 * 3, BatchDelete: true, Siblings: true,
	Durability: driver.Replicated, Billed: true, TimeResolution: time.Second,
	LongPoll: sqs.LongPoll, LaxReceipts: true, BillingChunk: sqs.BillingChunk,
	Metadata:      sqs.MetadataLimits,
	MaxBatchBytes: (sqs.MaxMessageSize - sqs.MaxBatch*(256+4)) / 4 * 3,
}

// TestConformance runs the contract's suite against fauxqs over HTTP. The
// emulator keeps real time, so time-based cases sleep (whole seconds).
// Each case has a region of its own (fauxqs keeps regions apart), so
// cases run in parallel and a second run (-count=2) starts empty.
func TestConformance(t *testing.T) {
	srv := sqstest.Shared(t)
	queuetest.Run(t, func(t *testing.T) *queuetest.Harness {
		t.Parallel()
		c := newClient(t, srv, sqs.Config{})
		h := &queuetest.Harness{
			NewQueue: func(ctx context.Context, name string) (*queue.Queue, error) {
				return c.Queue(ctx, name)
			},
			Features:            features,
			ConcurrencyMessages: 1000,
		}
		return h
	})
}

// newClient is a client for a fresh region of srv, closed at the end of
// the test.
func newClient(t testing.TB, srv *sqstest.Server, cfg sqs.Config) *sqs.Client {
	t.Helper()
	if cfg.Region == "" {
		cfg.Region = sqstest.NewRegion()
	}
	cfg.Account = sqstest.Account
	if cfg.Endpoint == "" {
		cfg.Endpoint = srv.Endpoint
	}
	c, err := sqs.NewClient(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
