package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/adaptq/adaptq/queue"
)

// benchBody is a typical small message: a JSON document of 128 bytes.
var benchBody = []byte(`{"order":12345,"customer":"c-0001","items":[{"sku":"a-1","qty":2},{"sku":"b-7","qty":1}],"note":"benchmark message body"}`)

func benchQueue(b *testing.B) (*DB, *queue.Queue) {
	b.Helper()
	db, err := Open(filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	q, err := db.Queue("bench")
	if err != nil {
		b.Fatal(err)
	}
	return db, q
}

// fill inserts n messages in transactions of 10,000, bypassing Put: the
// benchmarks measure the consumer side.
func fill(b *testing.B, pq *queue.Queue, n int) {
	b.Helper()
	ctx := context.Background()
	var db *DB
	pq.As(&db)
	q, err := db.queue(pq.Name())
	if err != nil {
		b.Fatal(err)
	}
	now := q.now()
	for n > 0 {
		k := min(n, 10000)
		tx, err := q.db.w.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		st, sb := tx.Stmt(q.db.st.put), tx.Stmt(q.db.st.putBody)
		for range k {
			res, err := st.Exec(q.qid, now, now, now+int64(queue.DefaultTTL))
			if err != nil {
				b.Fatal(err)
			}
			id, _ := res.LastInsertId()
			if _, err := sb.Exec(id, benchBody); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := tx.Stmt(q.db.st.depth).Exec(q.qid, k); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		n -= k
	}
}

func BenchmarkPut(b *testing.B) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		_, q := benchQueue(b)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if _, err := q.Put(ctx, benchBody, queue.PutOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
	b.Run("parallel", func(b *testing.B) {
		_, q := benchQueue(b)
		b.ReportAllocs()
		b.SetParallelism(4)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := q.Put(ctx, benchBody, queue.PutOptions{}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
}

// BenchmarkGetDeleteBatch32 drains a pre-filled queue with Get(32) and
// DeleteBatch; one op is one message got and deleted.
func BenchmarkGetDeleteBatch32(b *testing.B) {
	for _, consumers := range []int{1, 4} {
		b.Run(fmt.Sprintf("consumers=%d", consumers), func(b *testing.B) {
			ctx := context.Background()
			_, q := benchQueue(b)
			fill(b, q, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			var done atomic.Int64
			g, ctx := errgroup.WithContext(ctx)
			for range consumers {
				g.Go(func() error {
					rs := make([]queue.Receipt, 0, queue.MaxBatchSize)
					for {
						ms, err := q.Get(ctx, queue.MaxBatchSize, time.Minute)
						if err != nil {
							return err
						}
						if len(ms) == 0 {
							return nil
						}
						rs = rs[:0]
						for _, m := range ms {
							rs = append(rs, queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
						}
						res, err := q.DeleteBatch(ctx, rs)
						if err != nil {
							return err
						}
						for _, r := range res {
							if r != nil {
								return r
							}
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
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkMixed runs producers and consumers at once on one queue; one op
// is one message put, got and deleted.
func BenchmarkMixed(b *testing.B) {
	const producers, consumers = 4, 4
	ctx := context.Background()
	_, q := benchQueue(b)
	b.ReportAllocs()
	b.ResetTimer()
	var put, done atomic.Int64
	n := int64(b.N)
	g, ctx := errgroup.WithContext(ctx)
	for range producers {
		g.Go(func() error {
			for put.Add(1) <= n {
				if _, err := q.Put(ctx, benchBody, queue.PutOptions{}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for range consumers {
		g.Go(func() error {
			rs := make([]queue.Receipt, 0, queue.MaxBatchSize)
			for done.Load() < n {
				ms, err := q.Get(ctx, queue.MaxBatchSize, time.Minute)
				if err != nil {
					return err
				}
				if len(ms) == 0 {
					// The listener backs off when a queue is empty
					// (100 ms and up); a short pause stands in for it.
					time.Sleep(time.Millisecond)
					continue
				}
				rs = rs[:0]
				for _, m := range ms {
					rs = append(rs, queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
				}
				if _, err := q.DeleteBatch(ctx, rs); err != nil {
					return err
				}
				done.Add(int64(len(ms)))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
