package adaptq

import (
	"context"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/meter"
)

// The scaling signal on a billed backend: however often it is asked (an
// autoscaler polls it, anyone who reaches the admin address may), it reads
// each queue's depth at most once per ScalingDepthInterval.
func TestScalingSignalReadsABilledDepthAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	name := uniqueQueue("scaling-billed")
	fake := clock.NewFake(time.Time{})
	w := metricsWorker(t, `
admin: {address: "127.0.0.1:0"}
queues:
  - url: 'memory://`+name+`'
    handler: 'exec: cat'
`, withClock(fake), withQueueOptions(queue.WithWrapper(func(d driver.Queue) driver.Queue { return billed{d} })))
	runWorker(t, w)
	wq, err := w.poisonOf(name)
	if err != nil {
		t.Fatal(err)
	}
	counts := func() int64 { return wq.meter.Snapshot().Calls[meter.Count] }
	before := counts()
	for range 20 {
		if _, err := w.Scaling(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := counts() - before; n != 1 {
		t.Fatalf("20 signals at one instant made %d billed depth reads, want 1", n)
	}
	fake.Advance(ScalingDepthInterval)
	if _, err := w.Scaling(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := counts() - before; n != 2 {
		t.Fatalf("a signal an interval later made %d depth reads in all, want 2", n)
	}
}
