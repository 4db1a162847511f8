package redis_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/adaptq/adaptq/queue"
)

// benchBody is a typical small message: a JSON document of 128 bytes.
var benchBody = []byte(`{"order":12345,"customer":"c-0001","items":[{"sku":"a-1","qty":2},{"sku":"b-7","qty":1}],"note":"benchmark message body"}`)

// serverCPU is the server's CPU seconds so far (INFO cpu).
func serverCPU(b *testing.B, rdb *goredis.Client) float64 {
	s, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return sum
}

// BenchmarkPut: one producer, one script per message.
func BenchmarkPut(b *testing.B) {
	c, _ := newClient(b)
	q := mustQueue(b, c, "bench-put")
	ctx := context.Background()
	var rdb *goredis.Client
	q.As(&rdb)
	cpu := serverCPU(b, rdb)
	b.ResetTimer()
	for b.Loop() {
		if _, err := q.Put(ctx, benchBody, queue.PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric((serverCPU(b, rdb)-cpu)*1e6/float64(b.N), "server-µs/op")
}

// BenchmarkGetDeleteBatch: consumers get 32 and delete them in one batch;
// b.N messages are put first (not timed).
func BenchmarkGetDeleteBatch(b *testing.B) {
	for _, consumers := range []int{1, 4} {
		b.Run(strconv.Itoa(consumers)+"-consumers", func(b *testing.B) {
			c, _ := newClient(b)
			q := mustQueue(b, c, "bench-get")
			ctx := context.Background()
			var rdb *goredis.Client
			q.As(&rdb)
			g, gctx := errgroup.WithContext(ctx)
			var next atomic.Int64
			for range 8 {
				g.Go(func() error {
					for next.Add(1) <= int64(b.N) {
						if _, err := q.Put(gctx, benchBody, queue.PutOptions{}); err != nil {
							return err
						}
					}
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
			cpu := serverCPU(b, rdb)
			b.ResetTimer()
			var done atomic.Int64
			g, gctx = errgroup.WithContext(ctx)
			for range consumers {
				g.Go(func() error {
					for {
						ms, err := q.Get(gctx, queue.MaxBatchSize, time.Minute)
						if err != nil || len(ms) == 0 {
							return err
						}
						rs := make([]queue.Receipt, len(ms))
						for i, m := range ms {
							rs[i] = queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt}
						}
						if _, err := q.DeleteBatch(gctx, rs); err != nil {
							return err
						}
						done.Add(int64(len(ms)))
					}
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if done.Load() != int64(b.N) {
				b.Fatalf("drained %d of %d", done.Load(), b.N)
			}
			b.ReportMetric((serverCPU(b, rdb)-cpu)*1e6/float64(b.N), "server-µs/op")
		})
	}
}
