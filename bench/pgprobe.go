package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// PGProbeResult is one drain of the PostgreSQL probe (issue 34).
type PGProbeResult struct {
	Side          string
	Rate          float64       // messages drained a second
	Client        time.Duration // this process's CPU per message
	Server        time.Duration // the PostgreSQL server's CPU per message
	ServerMeasure bool
	Sys           time.Duration // the client's system CPU per message (part of Client)
	CtxSwitches   float64       // the client's context switches (voluntary + involuntary) per message
	Detail        string        // adaptq's queue calls and statements per message
}

// PGProbeSides are the sides PGProbe knows:
//   - hand: the hand-written loop of PEERS.md, 8 goroutines, each an
//     autocommitted SKIP LOCKED get of 32 (UPDATE … RETURNING) and an
//     `unnest` delete of the batch, on a table of its own;
//   - deleteret: 8 goroutines of `DELETE … RETURNING` 32 (at-most-once:
//     the server's floor, not a fair peer);
//   - default: adaptq as a user gets it, postgres.Open(url) and
//     listener.Options{};
//   - bench: section 11's settings, a pool of 16 and 8 tasks of 48 slots;
//   - driver: adaptq's driver without the listener, the hand loop's 8
//     goroutines calling Get(32) and DeleteBatch through postgres.Open's
//     pool;
//   - default:P, driver:P: those sides with a pool of P connections;
//   - fill: only the fill of the adaptq sides (for instruction counts).
var PGProbeSides = []string{"hand", "deleteret", "default", "bench", "driver", "fill"}

// PGProbe fills n messages of 200 bytes (not timed) and drains them with
// side, measuring the rate and the client's and the server's CPU.
func PGProbe(ctx context.Context, side string, n int) (PGProbeResult, error) {
	base, err := pgtest.Find()
	if err != nil {
		return PGProbeResult{}, err
	}
	r := PGProbeResult{Side: side}
	var d time.Duration
	var cpu cpuSpan
	switch side {
	case "hand", "deleteret":
		d, cpu, err = pgHandDrain(ctx, base, n, side == "deleteret")
	case "default", "bench":
		var opts []postgres.Option
		var lo listener.Options
		pool := 0
		if side == "bench" {
			pool = pgPoolConns
			lo = listener.Options{Tasks: pgTasks, MinTasks: pgTasks, Concurrency: pgTasks * listenerSlotsPerTask}
		}
		d, cpu, r.Detail, err = pgListenerDrain(ctx, base, n, pool, lo, opts...)
	case "driver":
		d, cpu, r.Detail, err = pgDriverDrain(ctx, base, n)
	case "fill":
		// Only the fill the adaptq sides do first (not timed): what to
		// subtract from a whole process's instructions (callgrind) to
		// leave a drain's.
		s, oerr := openPGSidePool(ctx, base, 0, nil)
		if oerr != nil {
			return r, oerr
		}
		defer s.close()
		err = s.fill(ctx, n)
		d = time.Nanosecond
	default:
		// l:T:C:P, the listener with T tasks (MinTasks too), concurrency
		// C and a pool of P connections (0: their defaults).
		var t, c, p int
		// default:P and driver:P, those sides with a pool of P.
		if _, serr := fmt.Sscanf(side, "default:%d", &p); serr == nil {
			d, cpu, r.Detail, err = pgListenerDrain(ctx, base, n, p, listener.Options{})
			break
		}
		if _, serr := fmt.Sscanf(side, "driver:%d", &p); serr == nil {
			d, cpu, r.Detail, err = pgDriverDrainPool(ctx, base, n, p)
			break
		}
		if _, serr := fmt.Sscanf(side, "l:%d:%d:%d", &t, &c, &p); serr == nil {
			d, cpu, r.Detail, err = pgListenerDrain(ctx, base, n, p, listener.Options{Tasks: t, MinTasks: t, Concurrency: c})
			break
		}
		return r, fmt.Errorf("pgprobe: unknown side %q (want one of %v)", side, PGProbeSides)
	}
	if err != nil {
		return r, err
	}
	r.Rate = rate(n, d)
	r.Client = cpu.client / time.Duration(n)
	r.Server = cpu.server / time.Duration(n)
	r.ServerMeasure = cpu.serverOK
	r.Sys = cpu.sys / time.Duration(n)
	r.CtxSwitches = float64(cpu.vcsw+cpu.ivcsw) / float64(n)
	return r, nil
}

func pgListenerDrain(ctx context.Context, base string, n, pool int, lo listener.Options, opts ...postgres.Option) (time.Duration, cpuSpan, string, error) {
	s := &pgSide{base: base, schema: pgtest.NewSchemaName(), calls: &callTracer{}, m: meter.New(0)}
	cfg, err := pgxpool.ParseConfig(base)
	if err != nil {
		return 0, cpuSpan{}, "", err
	}
	cfg.ConnConfig.Tracer = s.calls
	if pool > 0 {
		cfg.MaxConns = int32(pool)
	}
	if s.db, err = postgres.OpenConfig(ctx, cfg, append([]postgres.Option{postgres.WithSchema(s.schema)}, opts...)...); err != nil {
		return 0, cpuSpan{}, "", err
	}
	defer s.close()
	if s.q, err = s.db.Queue(ctx, "bench", queue.WithObserver(s.m)); err != nil {
		return 0, cpuSpan{}, "", err
	}
	if err := s.fill(ctx, n); err != nil {
		return 0, cpuSpan{}, "", err
	}
	before, st0, k0 := s.m.Snapshot(), s.calls.n.Load(), s.calls.snapshot()
	var d time.Duration
	cpu, err := measureCPU(func() (err error) {
		d, _, err = drainListener(ctx, s.q, n, noop, lo, 10*time.Minute)
		return err
	})
	detail := fmt.Sprintf("%s; statements %.4f: %s", breakdown(s.m.Snapshot().Sub(before)), float64(s.calls.n.Load()-st0)/float64(n), s.calls.kindsPer(k0, n))
	return d, cpu, detail, err
}

// pgHandDrain is PEERS.md's hand-written loop on a table of its own.
func pgHandDrain(ctx context.Context, base string, n int, deleteReturning bool) (time.Duration, cpuSpan, error) {
	schema := pgtest.NewSchemaName()
	sc := pgx.Identifier{schema}.Sanitize()
	if err := pgExec(ctx, base, `CREATE SCHEMA `+sc); err != nil {
		return 0, cpuSpan{}, err
	}
	defer pgtest.Drop(base, schema)
	cfg, err := pgConfig(base, nil)
	if err != nil {
		return 0, cpuSpan{}, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, cpuSpan{}, err
	}
	defer pool.Close()
	for _, q := range []string{
		`CREATE TABLE ` + sc + `.jobs (id bigserial PRIMARY KEY, visible_at timestamptz NOT NULL DEFAULT now(), dequeue_count int NOT NULL DEFAULT 0, body bytea NOT NULL)`,
		`CREATE INDEX ON ` + sc + `.jobs (visible_at, id)`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return 0, cpuSpan{}, err
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+sc+`.jobs (body) SELECT $1 FROM generate_series(1, $2::int)`, pgBody, n); err != nil {
		return 0, cpuSpan{}, err
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+sc+`.jobs`); err != nil {
		return 0, cpuSpan{}, err
	}
	get := `UPDATE ` + sc + `.jobs SET visible_at = now() + interval '30 seconds', dequeue_count = dequeue_count + 1
WHERE id IN (SELECT id FROM ` + sc + `.jobs WHERE visible_at <= now() ORDER BY visible_at, id LIMIT 32 FOR UPDATE SKIP LOCKED)
RETURNING id, body`
	if deleteReturning {
		get = `DELETE FROM ` + sc + `.jobs WHERE id IN (SELECT id FROM ` + sc + `.jobs WHERE visible_at <= now() ORDER BY visible_at, id LIMIT 32 FOR UPDATE SKIP LOCKED) RETURNING id, body`
	}
	del := `DELETE FROM ` + sc + `.jobs WHERE id IN (SELECT unnest($1::bigint[]))`
	var done atomic.Int64
	var d time.Duration
	cpu, err := measureCPU(func() error {
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, pgTasks)
		for range pgTasks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ids := make([]int64, 0, 32)
				for done.Load() < int64(n) {
					rows, err := pool.Query(ctx, get)
					if err != nil {
						errs <- err
						return
					}
					ids = ids[:0]
					var id int64
					var body []byte
					_, err = pgx.ForEachRow(rows, []any{&id, &body}, func() error {
						ids = append(ids, id)
						return nil
					})
					if err != nil {
						errs <- err
						return
					}
					if len(ids) == 0 {
						continue
					}
					if !deleteReturning {
						if _, err := pool.Exec(ctx, del, ids); err != nil {
							errs <- err
							return
						}
					}
					done.Add(int64(len(ids)))
				}
			}()
		}
		wg.Wait()
		d = time.Since(start)
		select {
		case err := <-errs:
			return err
		default:
			return nil
		}
	})
	return d, cpu, err
}

// pgDriverDrain is the hand loop's shape on adaptq's driver: 8 goroutines,
// Get(32) then DeleteBatch of what it got, no listener.
func pgDriverDrain(ctx context.Context, base string, n int) (time.Duration, cpuSpan, string, error) {
	return pgDriverDrainPool(ctx, base, n, 0)
}

// pgDriverDrainPool is pgDriverDrain with a pool of pool connections (0:
// postgres.Open's default).
func pgDriverDrainPool(ctx context.Context, base string, n, pool int) (time.Duration, cpuSpan, string, error) {
	s, err := openPGSidePool(ctx, base, pool, nil)
	if err != nil {
		return 0, cpuSpan{}, "", err
	}
	defer s.close()
	if err := s.fill(ctx, n); err != nil {
		return 0, cpuSpan{}, "", err
	}
	st0, k0 := s.calls.n.Load(), s.calls.snapshot()
	var done atomic.Int64
	var d time.Duration
	cpu, err := measureCPU(func() error {
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, pgTasks)
		for range pgTasks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rs := make([]queue.Receipt, 0, 32)
				for done.Load() < int64(n) {
					ms, err := s.q.Get(ctx, 32, 30*time.Second)
					if err != nil {
						errs <- err
						return
					}
					if len(ms) == 0 {
						continue
					}
					rs = rs[:0]
					for _, m := range ms {
						rs = append(rs, queue.Receipt{ID: m.ID, PopReceipt: m.PopReceipt})
					}
					if _, err := s.q.DeleteBatch(ctx, rs); err != nil {
						errs <- err
						return
					}
					done.Add(int64(len(ms)))
				}
			}()
		}
		wg.Wait()
		d = time.Since(start)
		select {
		case err := <-errs:
			return err
		default:
			return nil
		}
	})
	return d, cpu, fmt.Sprintf("statements %.4f: %s", float64(s.calls.n.Load()-st0)/float64(n), s.calls.kindsPer(k0, n)), err
}
