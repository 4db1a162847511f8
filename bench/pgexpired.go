package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgExpiredBacklog is the expired backlog of issue 25's defect 9: 50,000
// expired messages at the head of a queue took the median Get from 0.52 ms
// to 16 ms, and the sweep (1,000 a minute) needed 50 minutes.
const pgExpiredBacklog = 50_000

// pgExpiredLive is how many live messages sit behind the backlog.
const pgExpiredLive = 1000

// pgExpiredGets is how many timed Gets make each median.
const pgExpiredGets = 200

// fillExpired puts expired messages at the head of the side's queue (put
// two minutes ago with a minute to live) and live ones behind them, with
// the driver's own tables as fill does, then VACUUM ANALYZE.
func (s *pgSide) fillExpired(ctx context.Context, expired, live int) error {
	sc := pgx.Identifier{s.schema}.Sanitize()
	conn, err := s.db.Pool().Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	for _, part := range []struct {
		n                int
		put, visible, ex string
	}{
		{expired, "now() - interval '2 minutes'", "now() - interval '2 minutes'", "now() - interval '1 minute'"},
		{live, "now()", "now()", "now() + interval '7 days'"},
	} {
		if part.n == 0 {
			continue
		}
		_, err := conn.Exec(ctx, `
WITH m AS (
	INSERT INTO `+sc+`.messages (queue_id, visible_at, expires_at, inserted_at)
	SELECT q.id, `+part.visible+`, `+part.ex+`, `+part.put+`
	FROM `+sc+`.queues q, generate_series(1, $1::int) WHERE q.name = 'bench'
	RETURNING id, queue_id, expires_at
), b AS (
	INSERT INTO `+sc+`.bodies (id, body, queue_id, expires_at) SELECT id, $2, queue_id, expires_at FROM m
)
UPDATE `+sc+`.counts c SET n = n + $1::int FROM `+sc+`.queues q WHERE q.name = 'bench' AND c.queue_id = q.id AND c.shard = 0`, part.n, pgBody)
		if err != nil {
			return err
		}
	}
	for _, t := range []string{"messages", "bodies", "counts"} {
		if _, err := conn.Exec(ctx, `VACUUM ANALYZE `+sc+`.`+t); err != nil {
			return err
		}
	}
	return nil
}

// timedGets times k Gets of one message, each released at once
// (UpdateVisibility 0, which puts it behind the others).
func (s *pgSide) timedGets(ctx context.Context, k int) ([]time.Duration, error) {
	var ds []time.Duration
	for range k {
		t0 := time.Now()
		ms, err := s.q.Get(ctx, 1, time.Minute)
		ds = append(ds, time.Since(t0))
		if err != nil {
			return nil, err
		}
		if len(ms) != 1 {
			return nil, fmt.Errorf("a Get returned %d messages, want 1", len(ms))
		}
		if _, err := s.q.UpdateVisibility(ctx, ms[0].ID, ms[0].PopReceipt, 0); err != nil {
			return nil, err
		}
	}
	return ds, nil
}

// pgExpiredRows measures a Get beside an expired backlog, and the sweep.
func pgExpiredRows(ctx context.Context, e *Env, s *Section, base string) error {
	e.logf("postgres: expired backlog of %d", pgExpiredBacklog)
	// The baseline: the live messages alone, timed beside the backlog's
	// side once it is swept.
	clean, err := openPGSide(ctx, base, nil)
	if err != nil {
		return err
	}
	defer clean.close()
	if err := clean.fillExpired(ctx, 0, pgExpiredLive); err != nil {
		return err
	}

	// The sweep alone: nothing calls the queue while it runs.
	sw, err := openPGSide(ctx, base, nil)
	if err != nil {
		return err
	}
	defer sw.close()
	if err := sw.fillExpired(ctx, pgExpiredBacklog, pgExpiredLive); err != nil {
		return err
	}
	t0 := time.Now()
	swept, err := sw.db.Sweep(ctx, "bench")
	sweep := time.Since(t0)
	if err != nil {
		return err
	}
	if swept != pgExpiredBacklog {
		return fmt.Errorf("the sweep deleted %d of %d expired messages", swept, pgExpiredBacklog)
	}

	// Gets beside the backlog: the first pays the scan and starts the
	// sweep; the rest are timed once the count says it is done.
	bk, err := openPGSide(ctx, base, nil)
	if err != nil {
		return err
	}
	defer bk.close()
	if err := bk.fillExpired(ctx, pgExpiredBacklog, pgExpiredLive); err != nil {
		return err
	}
	first, err := bk.timedGets(ctx, 1)
	if err != nil {
		return err
	}
	t1 := time.Now()
	for {
		n, err := bk.q.Count(ctx)
		if err != nil {
			return err
		}
		if n == pgExpiredLive {
			break
		}
		if time.Since(t1) > 5*time.Minute {
			return fmt.Errorf("the backlog was not swept in 5 minutes: %d left", n-pgExpiredLive)
		}
		time.Sleep(10 * time.Millisecond)
	}
	gone := time.Since(t1)
	// The two sides alternate, one Get each, so that the machine's load
	// weighs on both alike.
	var baseline, after []time.Duration
	for range pgExpiredGets {
		for _, side := range []struct {
			s  *pgSide
			ds *[]time.Duration
		}{{clean, &baseline}, {bk, &after}} {
			d, err := side.s.timedGets(ctx, 1)
			if err != nil {
				return err
			}
			*side.ds = append(*side.ds, d...)
		}
	}
	b50, a50 := medianDuration(baseline), medianDuration(after)
	s.add(Row{What: fmt.Sprintf("Get of 1 beside %s expired messages at the head of the queue (%s live behind them)", commas(pgExpiredBacklog), commas(pgExpiredLive)),
		Figure: fmt.Sprintf("first Get %s, then p50 %s (%.2f× the p50 %s with no backlog)", ms(first[0]), ms(a50), float64(a50)/float64(b50), ms(b50)),
		Note:   fmt.Sprintf("the first Get steps over the backlog and starts the sweep in the background; Count read %s live %s after it; medians of %d Gets on each side, the sides alternating, each Get released at once", commas(pgExpiredLive), ms(gone), pgExpiredGets)})
	s.add(Row{What: fmt.Sprintf("sweep of %s expired messages (DB.Sweep, no other traffic)", commas(pgExpiredBacklog)), Figure: fmt.Sprintf("%s (%s messages/s)", ms(sweep), commas(int64(float64(pgExpiredBacklog)/sweep.Seconds()))),
		Note: fmt.Sprintf("statements of %d through the bodies_expiry index, one short transaction each; was 1,000 a minute from the head of the queue", 1000)})
	return nil
}
