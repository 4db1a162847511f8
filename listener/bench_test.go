package listener_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
)

func benchQueue(b *testing.B, n int) *queue.Queue {
	b.Helper()
	q, err := memory.NewStore().Queue("bench")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	body := []byte("a small message body of about fifty bytes .......")
	for i := 0; i < n; i++ {
		if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	return q
}

func noop(context.Context, *queue.Message) error { return nil }

// plainLoop is the hand-written consumer the listener must keep up with:
// workers each get 32, run the handler inline, and delete the batch, until
// the queue is empty.
func plainLoop(q *queue.Queue, workers int, h func(context.Context, *queue.Message) error) error {
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			rs := make([]queue.Receipt, 0, queue.MaxBatchSize)
			for {
				ms, err := q.Get(ctx, queue.MaxBatchSize, time.Minute)
				if err != nil {
					errs <- err
					return
				}
				if len(ms) == 0 {
					return
				}
				rs = rs[:0]
				for _, m := range ms {
					if h(ctx, m) == nil {
						rs = append(rs, queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
					}
				}
				if _, err := q.DeleteBatch(ctx, rs); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// BenchmarkListenerVsPlainLoop drains b.N messages with a no-op handler,
// once with the plain loop and once with the listener, on the same driver
// with the same number of goroutines getting. One op is one message.
func BenchmarkListenerVsPlainLoop(b *testing.B) {
	for _, tasks := range []int{1, 4} {
		b.Run(fmt.Sprintf("plain/tasks=%d", tasks), func(b *testing.B) {
			q := benchQueue(b, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			if err := plainLoop(q, tasks, noop); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
		b.Run(fmt.Sprintf("listener/tasks=%d", tasks), func(b *testing.B) {
			q := benchQueue(b, b.N)
			l, err := listener.New(q, noop, listener.Options{Tasks: tasks, Concurrency: tasks * 48})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			b.ReportAllocs()
			b.ResetTimer()
			if err := l.Start(ctx, tasks); err != nil {
				b.Fatal(err)
			}
			for l.Stats().Deleted < int64(b.N) {
				time.Sleep(200 * time.Microsecond)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			cancel()
			if err := l.Wait(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
