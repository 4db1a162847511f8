package memory_test

import (
	"context"
	"testing"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/queuetest"
)

func TestConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) *queuetest.Harness {
		c := clock.NewFake(clock.Epoch)
		s := memory.NewStore(memory.WithClock(c))
		return &queuetest.Harness{
			NewQueue: func(_ context.Context, name string) (queue.Queue, error) { return s.Queue(name) },
			Advance:  c.Advance,
		}
	})
}
