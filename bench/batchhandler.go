package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/adaptq/adaptq/handler"
	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// BatchHandlerRatioTarget is issue 29's goal: a batch handler doing one
// bulk INSERT per call drains at least this many times as many messages a
// second as a handler doing one INSERT per message.
const BatchHandlerRatioTarget = 5.0

// The batch side's settings: calls of up to bhMax messages, a partial call
// waiting up to bhWait, bhCalls calls at once (the sink pool's
// connections, so no call waits for one).
const (
	bhMax   = 500
	bhWait  = 20 * time.Millisecond
	bhCalls = pgPoolConns
)

// bhSink is the table both handlers write: one row per message, its id the
// key, so that a message run twice (at-least-once) writes once.
type bhSink struct {
	base, schema string
	pool         *pgxpool.Pool
	table        string
}

func openSink(ctx context.Context, base string) (*bhSink, error) {
	s := &bhSink{base: base, schema: pgtest.NewSchemaName()}
	s.table = pgx.Identifier{s.schema, "sink"}.Sanitize()
	if err := pgExec(ctx, base, `CREATE SCHEMA `+pgx.Identifier{s.schema}.Sanitize()); err != nil {
		return nil, err
	}
	if err := pgExec(ctx, base, `CREATE TABLE `+s.table+` (msg_id text PRIMARY KEY, body bytea NOT NULL)`); err != nil {
		s.close()
		return nil, err
	}
	cfg, err := pgConfig(base, nil)
	if err != nil {
		s.close()
		return nil, err
	}
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *bhSink) close() {
	if s.pool != nil {
		s.pool.Close()
	}
	_ = pgtest.Drop(s.base, s.schema)
}

// one is the single-message handler: one INSERT (one transaction) each.
func (s *bhSink) one(ctx context.Context, m *queue.Message) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO `+s.table+` (msg_id, body) VALUES ($1, $2) ON CONFLICT (msg_id) DO NOTHING`, m.ID, m.Body)
	return err
}

// bulk is the batch handler: one INSERT of every message of the call.
func (s *bhSink) bulk(ctx context.Context, ms []*queue.Message) []error {
	ids := make([]string, len(ms))
	bodies := make([][]byte, len(ms))
	for i, m := range ms {
		ids[i], bodies[i] = m.ID, m.Body
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO `+s.table+` (msg_id, body) SELECT * FROM unnest($1::text[], $2::bytea[]) ON CONFLICT (msg_id) DO NOTHING`, ids, bodies)
	if err != nil {
		return handler.FailAll(len(ms), err)
	}
	return nil
}

func (s *bhSink) rows(ctx context.Context) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.table).Scan(&n)
	return n, err
}

// bhRun is one drain of n messages into the sink.
type bhRun struct {
	rate  float64
	calls int64 // batch handler calls (0 for the single side)
	cpu   cpuSpan
}

// bhDrain fills a queue with n messages (not timed), drains it with the
// single handler or the batch handler, and checks that the sink holds n
// rows. onPG puts the queue on the PostgreSQL driver (a fresh schema),
// else on the memory driver.
func bhDrain(ctx context.Context, base string, n int, batch, onPG bool) (bhRun, error) {
	sink, err := openSink(ctx, base)
	if err != nil {
		return bhRun{}, err
	}
	defer sink.close()
	var q *queue.Queue
	if onPG {
		side, err := openPGSide(ctx, base, nil)
		if err != nil {
			return bhRun{}, err
		}
		defer side.close()
		if err := side.fill(ctx, n); err != nil {
			return bhRun{}, err
		}
		q = side.q
	} else {
		if q, err = memory.NewStore().Queue("bench"); err != nil {
			return bhRun{}, err
		}
		defer q.Close()
		for i := 0; i < n; i++ {
			if _, err := q.Put(ctx, pgBody, queue.PutOptions{}); err != nil {
				return bhRun{}, err
			}
		}
	}
	o := listener.Options{Tasks: pgTasks, MinTasks: pgTasks, Concurrency: pgTasks * listenerSlotsPerTask}
	var l *listener.Listener
	if batch {
		o.Concurrency, o.BatchMax, o.BatchWait = bhCalls, bhMax, bhWait
		l, err = listener.NewBatch(q, sink.bulk, o)
	} else {
		l, err = listener.New(q, sink.one, o)
	}
	if err != nil {
		return bhRun{}, err
	}
	var d time.Duration
	cpu, err := measureCPU(func() (err error) {
		d, err = drainWith(ctx, l, n, 10*time.Minute)
		return err
	})
	if err != nil {
		return bhRun{}, err
	}
	if got, err := sink.rows(ctx); err != nil || got != n {
		return bhRun{}, fmt.Errorf("the sink holds %d rows after draining %d messages (%v)", got, n, err)
	}
	if st := l.Stats(); st.Failed > 0 {
		return bhRun{}, fmt.Errorf("%d handler failures during the drain", st.Failed)
	}
	return bhRun{rate: rate(n, d), calls: l.Stats().Calls, cpu: cpu}, nil
}

// drainWith runs l until it has drained n messages, and returns how long
// that took.
func drainWith(ctx context.Context, l *listener.Listener, n int, limit time.Duration) (time.Duration, error) {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	if err := l.Start(runCtx, l.Options().Tasks); err != nil {
		return 0, err
	}
	deadline := start.Add(limit)
	for l.Drained() < int64(n) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			cancel()
			_ = l.Wait()
			return 0, fmt.Errorf("listener drained %d of %d messages: %w after %s", l.Drained(), n, errTimeout, limit)
		}
		time.Sleep(200 * time.Microsecond)
	}
	elapsed := time.Since(start)
	cancel()
	return elapsed, l.Wait()
}

func batchHandlerSection(ctx context.Context, e *Env, s *Section) error {
	base, err := pgtest.Find()
	if err != nil {
		return fmt.Errorf("no PostgreSQL server (set %s): %w", pgtest.EnvURL, err)
	}
	n := e.Sizes.BatchHandler
	repeats := max(1, min(e.Sizes.Repeats, 3))
	s.how("%s messages of %d bytes, each written as one row (its id the primary key, ON CONFLICT DO NOTHING) into a table of the machine's PostgreSQL (synchronous_commit as the server has it) through a pool of %d connections. Single: a handler doing one INSERT per message, the listener with %d tasks and %d handler slots each. Batch: a batch handler (listener.NewBatch) doing one INSERT … SELECT FROM unnest($1, $2) per call, calls of up to %d messages, a partial call waiting up to %s, %d calls at once, the same %d tasks. The queue is filled first (not timed); the clock runs from the listener's start to its %s-th delete; the sink's row count is checked after each run.",
		commas(int64(n)), len(pgBody), pgPoolConns, pgTasks, listenerSlotsPerTask, bhMax, bhWait, bhCalls, pgTasks, commas(int64(n)))
	s.how("Two queues: the memory driver (the handler's cost alone) and adaptq's PostgreSQL driver in a fresh schema of the same database (the whole pipeline: gets, renewals, batch deletes on the same server). %d runs of each side on each queue, the sides alternating; medians.", repeats)
	for _, onPG := range []bool{false, true} {
		var singles, batches []bhRun
		for i := 0; i < repeats; i++ {
			for _, batch := range []bool{false, true} {
				e.logf("batchhandler: queue on postgres=%v, batch=%v, run %d", onPG, batch, i+1)
				r, err := bhDrain(ctx, base, n, batch, onPG)
				if err != nil {
					return err
				}
				if batch {
					batches = append(batches, r)
				} else {
					singles = append(singles, r)
				}
			}
		}
		where := "memory queue"
		if onPG {
			where = "PostgreSQL queue"
		}
		rates := func(rs []bhRun) []float64 {
			out := make([]float64, len(rs))
			for i, r := range rs {
				out[i] = r.rate
			}
			return out
		}
		list := func(rs []bhRun) string {
			out := ""
			for i, r := range rs {
				if i > 0 {
					out += ", "
				}
				out += fmt.Sprintf("%s msgs/s", commas(int64(r.rate)))
			}
			return out
		}
		sm, bm := median(rates(singles)), median(rates(batches))
		var calls []float64
		for _, r := range batches {
			calls = append(calls, float64(n)/float64(max(r.calls, 1)))
		}
		s.add(Row{What: "single handler, one INSERT per message (" + where + ")", Figure: fmt.Sprintf("%s msgs/s", commas(int64(sm))), Note: "runs: " + list(singles)})
		s.add(Row{What: "batch handler, one INSERT per call (" + where + ")", Figure: fmt.Sprintf("%s msgs/s", commas(int64(bm))),
			Note: fmt.Sprintf("runs: %s; %.0f messages per call (median)", list(batches), median(calls))})
		ratio := bm / sm
		s.add(Row{What: "batch ÷ single, messages/s (" + where + ")", Figure: fmt.Sprintf("%.2f×", ratio),
			Target: fmt.Sprintf("≥ %.0f×", BatchHandlerRatioTarget), Holds: verdict(ratio >= BatchHandlerRatioTarget)})
	}
	return nil
}
