package memory_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/queuetest"
)

// features are what the memory driver promises, with a batch limit of
// maxBatch.
func features(maxBatch int) driver.Features {
	return driver.Features{
		Name: "memory", MaxBatch: maxBatch, MaxPeek: queue.MaxPeek, MaxBody: queue.DefaultMaxBodySize,
		ExactCount: true, BatchDelete: true, Siblings: true, NativeNotify: true, Durability: driver.InProcess,
		Metadata: driver.DefaultMetadataLimits,
	}
}

func TestConformance(t *testing.T) {
	// The default, and a batch limit below Azure's 32 (SQS's 10, and an odd
	// one), which the suite must hold the same way.
	for _, maxBatch := range []int{queue.MaxBatchSize, 10, 7} {
		t.Run(fmt.Sprint("max_batch_", maxBatch), func(t *testing.T) {
			queuetest.Run(t, func(t *testing.T) *queuetest.Harness {
				c := clock.NewFake(clock.Epoch)
				s := memory.NewStore(memory.WithClock(c), memory.WithMaxBatch(maxBatch))
				return &queuetest.Harness{
					NewQueue: func(_ context.Context, name string) (*queue.Queue, error) { return s.Queue(name) },
					Advance:  c.Advance,
					Features: features(maxBatch),
				}
			})
		})
	}
}
