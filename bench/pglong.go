package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
)

// timedGets records how long each Get of the driver it wraps took.
type timedGets struct {
	driver.Queue
	mu  sync.Mutex
	lat []time.Duration
}

func (t *timedGets) Get(ctx context.Context, n int, vis time.Duration) ([]*driver.Message, error) {
	t0 := time.Now()
	ms, err := t.Queue.Get(ctx, n, vis)
	d := time.Since(t0)
	t.mu.Lock()
	t.lat = append(t.lat, d)
	t.mu.Unlock()
	return ms, err
}

// pgLongResult is what the long run measured.
type pgLongResult struct {
	n            int
	rate         float64
	maxDead, end int64 // n_dead_tup of messages + bodies: the most seen, and at the end
	samples      int
	vacuums      int64 // autovacuum and vacuum runs on the two tables during the run
	firstP50     time.Duration
	firstP99     time.Duration
	lastP50      time.Duration
	lastP99      time.Duration
	quietAlone   time.Duration // p50 Get on a quiet queue of the same table, before the run
	quietChurn   time.Duration // the same during the run
	sizeBefore   int64
	sizeAfter    int64
	deadTrace    []int64
}

// pgLong drains n messages from full with the listener, sampling the
// tables' dead tuples every second and timing every Get; a quiet queue in
// the same tables is got from every 100 ms, to show what the churning
// neighbour costs it.
func pgLong(ctx context.Context, e *Env, base string, n int) (pgLongResult, error) {
	var tg *timedGets
	s, err := openPGSide(ctx, base, func(d driver.Queue) driver.Queue {
		tg = &timedGets{Queue: d}
		return tg
	})
	if err != nil {
		return pgLongResult{}, err
	}
	defer s.close()
	quiet, err := s.db.Queue(ctx, "quiet")
	if err != nil {
		return pgLongResult{}, err
	}
	e.logf("postgres: long run: filling %s", commas(int64(n)))
	if err := s.fill(ctx, n); err != nil {
		return pgLongResult{}, err
	}
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return pgLongResult{}, err
	}
	defer conn.Close(context.Background())
	stats := func() (dead, vac int64, err error) {
		err = conn.QueryRow(ctx, `SELECT coalesce(sum(n_dead_tup), 0), coalesce(sum(autovacuum_count + vacuum_count), 0)
			FROM pg_stat_user_tables WHERE schemaname = $1 AND relname IN ('messages', 'bodies')`, s.schema).Scan(&dead, &vac)
		return
	}
	size := func() (b int64) {
		_ = conn.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass) + pg_total_relation_size($2::regclass)`,
			pgx.Identifier{s.schema, "messages"}.Sanitize(), pgx.Identifier{s.schema, "bodies"}.Sanitize()).Scan(&b)
		return
	}
	quietGet := func() (time.Duration, error) {
		if _, err := quiet.Put(ctx, pgBody, queue.PutOptions{}); err != nil {
			return 0, err
		}
		t0 := time.Now()
		ms, err := quiet.Get(ctx, 32, time.Minute)
		d := time.Since(t0)
		if err != nil {
			return 0, err
		}
		for _, m := range ms {
			_ = quiet.Delete(ctx, m.ID, m.PopReceipt)
		}
		return d, nil
	}
	var alone []time.Duration
	for range 100 {
		d, err := quietGet()
		if err != nil {
			return pgLongResult{}, err
		}
		alone = append(alone, d)
	}
	r := pgLongResult{n: n, quietAlone: medianDuration(alone), sizeBefore: size()}
	_, vac0, err := stats()
	if err != nil {
		return r, err
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var churn []time.Duration
	var sampleErr error
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		qt := time.NewTicker(100 * time.Millisecond)
		defer qt.Stop()
		for {
			select {
			case <-stop:
				return
			case <-qt.C:
				if d, err := quietGet(); err == nil {
					churn = append(churn, d)
				}
			case <-tick.C:
				dead, _, err := stats()
				if err != nil {
					sampleErr = err
					return
				}
				r.deadTrace = append(r.deadTrace, dead)
				r.maxDead = max(r.maxDead, dead)
				r.samples++
			}
		}
	})
	e.logf("postgres: long run: draining")
	d, _, err := drainListener(ctx, s.q, n, noop, listener.Options{Tasks: pgTasks, MinTasks: pgTasks, Concurrency: pgTasks * listenerSlotsPerTask}, 30*time.Minute)
	close(stop)
	wg.Wait()
	if err != nil {
		return r, err
	}
	if sampleErr != nil {
		return r, sampleErr
	}
	r.rate = rate(n, d)
	dead, vac1, err := stats()
	if err != nil {
		return r, err
	}
	r.end = dead
	r.vacuums = vac1 - vac0
	r.sizeAfter = size()
	r.quietChurn = medianDuration(churn)
	tg.mu.Lock()
	lat := append([]time.Duration(nil), tg.lat...)
	tg.mu.Unlock()
	tenth := max(len(lat)/10, 1)
	r.firstP50, r.firstP99 = percentile(lat[:tenth], 50), percentile(lat[:tenth], 99)
	r.lastP50, r.lastP99 = percentile(lat[len(lat)-tenth:], 50), percentile(lat[len(lat)-tenth:], 99)
	return r, nil
}

func (r pgLongResult) traceString() string {
	if len(r.deadTrace) == 0 {
		return ""
	}
	step := max(len(r.deadTrace)/12, 1)
	var b []string
	for i := 0; i < len(r.deadTrace); i += step {
		b = append(b, commas(r.deadTrace[i]))
	}
	return fmt.Sprintf("n_dead_tup every %d s: %s", step, joinComma(b))
}

func joinComma(xs []string) string {
	out := ""
	for i, x := range xs {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}
