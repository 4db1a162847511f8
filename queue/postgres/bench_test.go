package postgres_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// BenchmarkDrain drains b.N messages of 200 bytes with 8 goroutines, each
// a Get of 32 and a DeleteBatch of what it got: the driver's cost per
// message, without the listener. Filling is not timed.
func BenchmarkDrain(b *testing.B) {
	schema := pgtest.Schema(b)
	ctx := context.Background()
	db, err := postgres.Open(ctx, pgtest.URL(b)+"&pool_max_conns=16"+os.Getenv("PGX_EXTRA"), postgres.WithSchema(schema))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	q, err := db.Queue(ctx, "drain")
	if err != nil {
		b.Fatal(err)
	}
	sc := pgx.Identifier{schema}.Sanitize()
	body := make([]byte, 200)
	for left := b.N; left > 0; left -= 50_000 {
		k := min(left, 50_000)
		if _, err := db.Pool().Exec(ctx, fmt.Sprintf(`
WITH m AS (
	INSERT INTO %[1]s.messages (queue_id, visible_at, expires_at, inserted_at)
	SELECT (SELECT id FROM %[1]s.queues WHERE name = 'drain'), now(), now() + interval '1 day', now() FROM generate_series(1, $1::int)
	RETURNING id, queue_id, expires_at
) INSERT INTO %[1]s.bodies (id, body, queue_id, expires_at) SELECT id, $2, queue_id, expires_at FROM m`, sc), k, body); err != nil {
			b.Fatal(err)
		}
	}
	for _, t := range []string{"messages", "bodies", "counts"} {
		if _, err := db.Pool().Exec(ctx, "VACUUM ANALYZE "+sc+"."+t); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				ms, err := q.Get(ctx, 32, time.Minute)
				if err != nil {
					b.Error(err)
					return
				}
				if len(ms) == 0 {
					return
				}
				rs := make([]queue.Receipt, len(ms))
				for i, m := range ms {
					rs[i] = queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt}
				}
				if _, err := q.DeleteBatch(ctx, rs); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}
