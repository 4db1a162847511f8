package memory_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
)

func fill(b *testing.B, q *queue.Queue, n int) {
	b.Helper()
	ctx := context.Background()
	body := []byte("a small message body of about fifty bytes .......")
	for i := 0; i < n; i++ {
		if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPut measures one Put of a 50-byte body.
func BenchmarkPut(b *testing.B) {
	q, _ := memory.NewStore().Queue("bench-put")
	ctx := context.Background()
	body := []byte("a small message body of about fifty bytes .......")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGetDeleteBatch32 measures a consumer's cycle, Get(32) then one
// DeleteBatch, on a queue with a 100,000-message backlog; one op is one
// message.
func BenchmarkGetDeleteBatch32(b *testing.B) {
	q, _ := memory.NewStore().Queue("bench-get")
	ctx := context.Background()
	const backlog = 100_000
	fill(b, q, backlog)
	rs := make([]queue.Receipt, 0, queue.MaxBatchSize)
	b.ReportAllocs()
	b.ResetTimer()
	done := 0
	for done < b.N {
		ms, err := q.Get(ctx, queue.MaxBatchSize, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if len(ms) == 0 {
			b.StopTimer()
			fill(b, q, backlog)
			b.StartTimer()
			continue
		}
		rs = rs[:0]
		for _, m := range ms {
			rs = append(rs, queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
		}
		if _, err := q.DeleteBatch(ctx, rs); err != nil {
			b.Fatal(err)
		}
		done += len(ms)
	}
	b.ReportMetric(float64(done)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkMixed runs 4 producers and 4 consumers at once; one op is one
// message put and later got and deleted.
func BenchmarkMixed(b *testing.B) {
	q, _ := memory.NewStore().Queue("bench-mixed")
	ctx := context.Background()
	body := []byte("a small message body of about fifty bytes .......")
	const producers, consumers = 4, 4
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N / producers
	total := per * producers
	var mu sync.Mutex
	consumed := 0
	for p := 0; p < producers; p++ {
		wg.Go(func() {
			for i := 0; i < per; i++ {
				if _, err := q.Put(ctx, body, queue.PutOptions{}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	for c := 0; c < consumers; c++ {
		wg.Go(func() {
			rs := make([]queue.Receipt, 0, queue.MaxBatchSize)
			for {
				mu.Lock()
				finished := consumed >= total
				mu.Unlock()
				if finished {
					return
				}
				ms, err := q.Get(ctx, queue.MaxBatchSize, time.Minute)
				if err != nil {
					b.Error(err)
					return
				}
				rs = rs[:0]
				for _, m := range ms {
					rs = append(rs, queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
				}
				if _, err := q.DeleteBatch(ctx, rs); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				consumed += len(ms)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "msgs/s")
}
