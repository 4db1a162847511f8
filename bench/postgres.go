package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/adaptq/adaptq/listener"
	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// Targets of issue 15.
const (
	PostgresRatioTarget     = 2.0  // adaptq's processed jobs/s over River's
	PostgresHandTarget      = 0.9  // over the hand-written loop's (issue 34)
	PostgresCallsTarget     = 1.1  // backend calls per message
	PostgresIdleCallsTarget = 12.0 // calls an hour of an idle worker
	PostgresWakeTarget      = 10 * time.Millisecond
)

// The drain settings, the same for both: one pool size, the machine's
// PostgreSQL with its defaults (synchronous_commit on).
const (
	// pgPoolConns is the pool size of both sides.
	pgPoolConns = 16
	// pgTasks are adaptq's dequeue tasks (the hand-written loop of
	// PEERS.md peaks at 8 goroutines on two cores).
	pgTasks = 8
	// River's settings for throughput, from its own benchmark
	// (cmd/river/riverbench): FetchCooldown 2 ms, FetchPollInterval 20 ms;
	// its comment finds about 1,000 workers best ("500 and 2,000 performed
	// a little more poorly").
	riverMaxWorkers        = 1000
	riverFetchCooldown     = 2 * time.Millisecond
	riverFetchPollInterval = 20 * time.Millisecond
)

// pgBody is a 200-byte message, the size of PEERS.md's figures; River's
// job args carry the same bytes as a string.
var pgBody = []byte(strings.Repeat("x", 200))

// callTracer counts the statements and batches a pgx pool sends: the round
// trips to the server, whoever makes them.
type callTracer struct {
	n atomic.Int64

	mu    sync.Mutex
	kinds map[string]int64 // statements by the start of their text
}

func (c *callTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	k := strings.TrimSpace(d.SQL[:min(len(d.SQL), 40)]) // no allocation: the probe's own CPU stays out of the figures
	c.mu.Lock()
	if c.kinds == nil {
		c.kinds = map[string]int64{}
	}
	c.kinds[k]++
	c.mu.Unlock()
	return ctx
}

// snapshot is the statements sent so far, by kind.
func (c *callTracer) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.kinds)
}

// kindsPer describes the statements sent since before, per message.
func (c *callTracer) kindsPer(before map[string]int64, n int) string {
	by := map[string]int64{}
	for k, v := range c.snapshot() {
		f := strings.Fields(k)
		by[strings.Join(f[:min(3, len(f))], " ")] += v - before[k]
	}
	var parts []string
	for k, d := range by {
		if d > 0 {
			parts = append(parts, fmt.Sprintf("[%s] %.4f", k, float64(d)/float64(n)))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
func (c *callTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *callTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *callTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *callTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
func (c *callTracer) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *callTracer) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// pgConfig is a pool config on the server with the harness's pool size
// and, if t is set, a tracer.
func pgConfig(base string, t *callTracer) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(base)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = pgPoolConns
	if t != nil {
		cfg.ConnConfig.Tracer = t
	}
	return cfg, nil
}

func pgExec(ctx context.Context, base, sql string, args ...any) error {
	c, err := pgx.Connect(ctx, base)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	_, err = c.Exec(ctx, sql, args...)
	return err
}

// pgSide is one adaptq queue in a fresh schema.
type pgSide struct {
	base   string
	schema string
	db     *postgres.DB
	q      *queue.Queue
	m      *meter.Meter
	calls  *callTracer
}

func openPGSide(ctx context.Context, base string, wrap func(driver.Queue) driver.Queue, opts ...postgres.Option) (*pgSide, error) {
	return openPGSidePool(ctx, base, pgPoolConns, wrap, opts...)
}

// openPGSidePool is openPGSide with a pool of pool connections; 0 is
// pgxpool's default (max(4, GOMAXPROCS)), what postgres.Open gives a user.
func openPGSidePool(ctx context.Context, base string, pool int, wrap func(driver.Queue) driver.Queue, opts ...postgres.Option) (*pgSide, error) {
	s := &pgSide{base: base, schema: pgtest.NewSchemaName(), calls: &callTracer{}, m: meter.New(0)}
	cfg, err := pgConfig(base, s.calls)
	if err != nil {
		return nil, err
	}
	if pool == 0 {
		def, err := pgxpool.ParseConfig(base)
		if err != nil {
			return nil, err
		}
		cfg.MaxConns = def.MaxConns
	}
	s.db, err = postgres.OpenConfig(ctx, cfg, append([]postgres.Option{postgres.WithSchema(s.schema)}, opts...)...)
	if err != nil {
		return nil, err
	}
	qo := []queue.Option{queue.WithObserver(s.m)}
	if wrap != nil {
		qo = append(qo, queue.WithWrapper(wrap))
	}
	s.q, err = s.db.Queue(ctx, "bench", qo...)
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *pgSide) close() {
	if s.db != nil {
		_ = s.db.Close()
	}
	_ = pgtest.Drop(s.base, s.schema)
}

// fill puts n messages with one INSERT … SELECT per 50,000 (the driver's
// own tables, as its doc gives them), then VACUUM ANALYZE: not timed, and
// the same preparation River's side gets.
func (s *pgSide) fill(ctx context.Context, n int) error {
	sc := pgx.Identifier{s.schema}.Sanitize()
	conn, err := s.db.Pool().Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var qid int32
	if err := conn.QueryRow(ctx, `SELECT id FROM `+sc+`.queues WHERE name = 'bench'`).Scan(&qid); err != nil {
		return err
	}
	for left := n; left > 0; {
		k := min(left, 50_000)
		_, err := conn.Exec(ctx, `
WITH m AS (
	INSERT INTO `+sc+`.messages (queue_id, visible_at, expires_at, inserted_at)
	SELECT $1, now(), now() + interval '7 days', now() FROM generate_series(1, $2::int)
	RETURNING id, expires_at
), b AS (
	INSERT INTO `+sc+`.bodies (id, body, queue_id, expires_at) SELECT id, $3, $1, expires_at FROM m
)
UPDATE `+sc+`.counts SET n = n + $2::int WHERE queue_id = $1 AND shard = 0`, qid, k, pgBody)
		if err != nil {
			return err
		}
		left -= k
	}
	for _, t := range []string{"messages", "bodies", "counts"} {
		if _, err := conn.Exec(ctx, `VACUUM ANALYZE `+sc+`.`+t); err != nil {
			return err
		}
	}
	return nil
}

// drainAdaptq drains n messages with the listener (its default options,
// a no-op handler, postgres.Open's pool) and returns jobs/s and the calls per message, counted by the
// meter (queue calls) and by the tracer (every statement).
type pgDrain struct {
	rate       float64
	calls      float64 // queue calls per message (meter)
	statements float64 // statements per message (tracer)
	detail     string
	cpu        cpuSpan // over the drain
	n          int
}

// cpuPerMsg is the client's and the server's CPU per message.
func (d pgDrain) cpuPerMsg() (client, server time.Duration) {
	return d.cpu.client / time.Duration(d.n), d.cpu.server / time.Duration(d.n)
}

func drainAdaptq(ctx context.Context, base string, n int, opts ...postgres.Option) (pgDrain, error) {
	s, err := openPGSidePool(ctx, base, 0, nil, opts...)
	if err != nil {
		return pgDrain{}, err
	}
	defer s.close()
	if err := s.fill(ctx, n); err != nil {
		return pgDrain{}, err
	}
	before := s.m.Snapshot()
	st0 := s.calls.n.Load()
	var d time.Duration
	cpu, err := measureCPU(func() (err error) {
		d, _, err = drainListener(ctx, s.q, n, noop, listener.Options{}, 10*time.Minute)
		return err
	})
	if err != nil {
		return pgDrain{}, err
	}
	calls := s.m.Snapshot().Sub(before)
	st := s.calls.n.Load() - st0
	return pgDrain{
		rate:       rate(n, d),
		calls:      float64(calls.Total()) / float64(n),
		statements: float64(st) / float64(n),
		detail:     breakdown(calls),
		cpu:        cpu,
		n:          n,
	}, nil
}

// riverArgs is the bench job: the same 200 bytes as adaptq's messages.
type riverArgs struct {
	Body string `json:"body"`
}

func (riverArgs) Kind() string { return "adaptq_bench" }

type riverNoop struct {
	river.WorkerDefaults[riverArgs]
}

func (riverNoop) Work(context.Context, *river.Job[riverArgs]) error { return nil }

// riverSide is River on a fresh schema, migrated by rivermigrate.
type riverSide struct {
	base   string
	schema string
	pool   *pgxpool.Pool
	calls  *callTracer
}

func openRiverSide(ctx context.Context, base string) (*riverSide, error) {
	r := &riverSide{base: base, schema: "river_" + strings.TrimPrefix(pgtest.NewSchemaName(), "t_"), calls: &callTracer{}}
	if err := pgExec(ctx, base, `CREATE SCHEMA `+pgx.Identifier{r.schema}.Sanitize()); err != nil {
		return nil, err
	}
	cfg, err := pgConfig(base, r.calls)
	if err != nil {
		r.close()
		return nil, err
	}
	if r.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		r.close()
		return nil, err
	}
	m, err := rivermigrate.New(riverpgxv5.New(r.pool), &rivermigrate.Config{Schema: r.schema})
	if err != nil {
		r.close()
		return nil, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		r.close()
		return nil, fmt.Errorf("river migrate: %w", err)
	}
	return r, nil
}

func (r *riverSide) close() {
	if r.pool != nil {
		r.pool.Close()
	}
	_ = pgtest.Drop(r.base, r.schema)
}

func (r *riverSide) client(cfg *river.Config) (*river.Client[pgx.Tx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, riverNoop{})
	cfg.Workers = workers
	cfg.Schema = r.schema
	return river.NewClient(riverpgxv5.New(r.pool), cfg)
}

// fill inserts n jobs with InsertMany, 5,000 at a time (as River's
// benchmark does), then VACUUM ANALYZE.
func (r *riverSide) fill(ctx context.Context, c *river.Client[pgx.Tx], n int) error {
	args := riverArgs{Body: string(pgBody)}
	batch := make([]river.InsertManyParams, 0, 5000)
	for left := n; left > 0; {
		k := min(left, 5000)
		batch = batch[:0]
		for range k {
			batch = append(batch, river.InsertManyParams{Args: args})
		}
		if _, err := c.InsertMany(ctx, batch); err != nil {
			return err
		}
		left -= k
	}
	_, err := r.pool.Exec(ctx, `VACUUM ANALYZE `+pgx.Identifier{r.schema, "river_job"}.Sanitize())
	return err
}

// drainRiver fills n jobs and works them with River's client, timing from
// Start to the n-th completion event (the completer has marked the job
// completed in the database).
func drainRiver(ctx context.Context, base string, n int) (pgDrain, error) {
	r, err := openRiverSide(ctx, base)
	if err != nil {
		return pgDrain{}, err
	}
	defer r.close()
	c, err := r.client(&river.Config{
		FetchCooldown:     riverFetchCooldown,
		FetchPollInterval: riverFetchPollInterval,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverMaxWorkers}},
	})
	if err != nil {
		return pgDrain{}, err
	}
	if err := r.fill(ctx, c, n); err != nil {
		return pgDrain{}, err
	}
	events, cancelSub := c.SubscribeConfig(&river.SubscribeConfig{ChanSize: n + 1000, Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed}})
	defer cancelSub()
	st0 := r.calls.n.Load()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	c0, _ := cpuTime()
	s0, ok0 := pgServerCPU()
	start := time.Now()
	if err := c.Start(runCtx); err != nil {
		return pgDrain{}, err
	}
	done, failed := 0, 0
	limit := time.After(10 * time.Minute)
	var elapsed time.Duration
loop:
	for {
		select {
		case ev := <-events:
			if ev == nil {
				return pgDrain{}, errors.New("river: subscription closed")
			}
			if ev.Kind == river.EventKindJobFailed {
				failed++
			}
			if done++; done == n {
				elapsed = time.Since(start)
				break loop
			}
		case <-limit:
			return pgDrain{}, fmt.Errorf("river worked %d of %d jobs: %w", done, n, errTimeout)
		case <-ctx.Done():
			return pgDrain{}, ctx.Err()
		}
	}
	st := r.calls.n.Load() - st0
	c1, _ := cpuTime()
	s1, ok1 := pgServerCPU()
	cpu := cpuSpan{client: c1 - c0, server: s1 - s0, serverOK: ok0 && ok1}
	stopCtx, stopCancel := context.WithTimeout(context.Background(), time.Minute)
	defer stopCancel()
	_ = c.Stop(stopCtx)
	if failed > 0 {
		return pgDrain{}, fmt.Errorf("river: %d jobs failed", failed)
	}
	return pgDrain{rate: rate(n, elapsed), statements: float64(st) / float64(n), cpu: cpu, n: n}, nil
}

// postgresSection measures adaptq's PostgreSQL driver beside River on the
// machine's PostgreSQL.
func postgresSection(ctx context.Context, e *Env, s *Section) error {
	base, err := pgtest.Find()
	if err != nil {
		return fmt.Errorf("no PostgreSQL server (set %s): %w", pgtest.EnvURL, err)
	}
	var version, syncCommit, naptime string
	if c, err := pgx.Connect(ctx, base); err == nil {
		_ = c.QueryRow(ctx, `SELECT split_part(version(), ' ', 2), current_setting('synchronous_commit'), current_setting('autovacuum_naptime')`).Scan(&version, &syncCommit, &naptime)
		c.Close(ctx)
	}
	n := e.Sizes.Postgres
	repeats := e.Sizes.Repeats
	s.how("PostgreSQL %s on loopback, synchronous_commit = %s for both, autovacuum_naptime = %s; each side in a fresh schema of the same database; River and the hand-written loop with pools of %d connections, adaptq with postgres.Open's (pgxpool's default, max(4, GOMAXPROCS)).", version, syncCommit, naptime, pgPoolConns)
	s.how("Throughput: %s jobs of %d bytes, drained from full with a no-op handler, %d runs of each side alternating (median). Filling is not timed: adaptq's with one INSERT … SELECT per 50,000 messages, River's with InsertMany of 5,000; both tables VACUUM ANALYZEd before the clock starts.", commas(int64(n)), len(pgBody), repeats)
	s.how("adaptq: postgres.Open's pool and the listener with its default options (`listener.Options{}`: one task that grows to postgres.BusyTasks = %d while gets come back full, batch size 32, concurrency 64), as a user gets them. River %s: its own client (riverpgxv5, a pool of %d) with MaxWorkers %d, FetchCooldown %s, FetchPollInterval %s (its benchmark's settings), timed from Start to the last JobCompleted event.", postgres.BusyTasks, riverVersion, pgPoolConns, riverMaxWorkers, riverFetchCooldown, riverFetchPollInterval)

	// ADAPTQ_BENCH_POSTGRES_PARTS (drain,idle,wake,expired,long) runs some of the
	// section's parts only, to study one.
	part := func(name string) bool {
		v := os.Getenv("ADAPTQ_BENCH_POSTGRES_PARTS")
		return v == "" || strings.Contains(v, name)
	}
	if part("drain") {
		if err := pgThroughput(ctx, e, s, base, n, repeats); err != nil {
			return err
		}
	}
	if part("idle") {
		if err := pgIdleRows(ctx, e, s, base); err != nil {
			return err
		}
	}
	if part("wake") {
		if err := pgWakeRows(ctx, e, s, base); err != nil {
			return err
		}
	}
	if part("expired") {
		if err := pgExpiredRows(ctx, e, s, base); err != nil {
			return err
		}
	}
	if part("long") {
		if err := pgLongRows(ctx, e, s, base); err != nil {
			return err
		}
	}
	return nil
}

const riverVersion = "v0.51.1"

// cpuMedian is the median client and server CPU per message of runs.
func cpuMedian(ds []pgDrain) (client, server time.Duration) {
	var cs, ss []float64
	for _, d := range ds {
		c, s := d.cpuPerMsg()
		cs, ss = append(cs, float64(c)), append(ss, float64(s))
	}
	return time.Duration(median(cs)), time.Duration(median(ss))
}

// pgThroughput is the side-by-side drain.
func pgThroughput(ctx context.Context, e *Env, s *Section, base string, n, repeats int) error {
	var ad, aa, rv, hd []pgDrain
	for i := 0; i < repeats; i++ {
		e.logf("postgres: run %d/%d: hand-written loop", i+1, repeats)
		hdur, hcpu, err := pgHandDrain(ctx, base, n, false)
		if err != nil {
			return fmt.Errorf("hand-written drain: %w", err)
		}
		hd = append(hd, pgDrain{rate: rate(n, hdur), cpu: hcpu, n: n})
		e.logf("postgres: run %d/%d: adaptq", i+1, repeats)
		a, err := drainAdaptq(ctx, base, n)
		if err != nil {
			return fmt.Errorf("adaptq drain: %w", err)
		}
		ad = append(ad, a)
		e.logf("postgres: run %d/%d: adaptq, async_leases", i+1, repeats)
		x, err := drainAdaptq(ctx, base, n, postgres.WithAsyncLeases())
		if err != nil {
			return fmt.Errorf("adaptq drain (async_leases): %w", err)
		}
		aa = append(aa, x)
		e.logf("postgres: run %d/%d: river", i+1, repeats)
		r, err := drainRiver(ctx, base, n)
		if err != nil {
			return fmt.Errorf("river drain: %w", err)
		}
		rv = append(rv, r)
		ac, as := a.cpuPerMsg()
		rc, rs := r.cpuPerMsg()
		e.logf("postgres: adaptq %s (cpu/msg client %s server %s), river %s (client %s server %s)", perSec(a.rate), ac, as, perSec(r.rate), rc, rs)
	}
	ar := median(pick(ad, func(d pgDrain) float64 { return d.rate }))
	rr := median(pick(rv, func(d pgDrain) float64 { return d.rate }))
	ratio := ar / rr
	s.add(Row{What: "adaptq, PostgreSQL driver + listener", Figure: perSec(ar), Note: "runs: " + ratesList(ad)})
	s.add(Row{What: "River " + riverVersion + " (riverpgxv5)", Figure: perSec(rr), Note: "runs: " + ratesList(rv)})
	s.add(Row{What: "adaptq ÷ River, processed jobs/s", Figure: fmt.Sprintf("%.2f×", ratio), Target: fmt.Sprintf("≥ %.0f×", PostgresRatioTarget), Holds: verdict(ratio >= PostgresRatioTarget)})
	hr := median(pick(hd, func(d pgDrain) float64 { return d.rate }))
	hcl, hsv := cpuMedian(hd)
	s.add(Row{What: fmt.Sprintf("hand-written pgx loop (PEERS.md: %d goroutines, autocommitted SKIP LOCKED get of 32, `unnest` delete of the batch)", pgTasks), Figure: perSec(hr),
		Note: "runs: " + ratesList(hd) + fmt.Sprintf("; CPU per message %s client + %s server", usString(hcl), usString(hsv))})
	s.add(Row{What: "adaptq (default options) ÷ hand-written loop, processed jobs/s", Figure: fmt.Sprintf("%.2f×", ar/hr), Target: fmt.Sprintf("≥ %.1f×", PostgresHandTarget), Holds: verdict(ar/hr >= PostgresHandTarget)})
	xr := median(pick(aa, func(d pgDrain) float64 { return d.rate }))
	xcl, xsv := cpuMedian(aa)
	s.add(Row{What: "adaptq with async_leases=true (Gets and renewals commit without waiting for the WAL flush; not the default)", Figure: perSec(xr),
		Note: "runs: " + ratesList(aa) + fmt.Sprintf("; CPU per job %s client + %s server", usString(xcl), usString(xsv))})
	s.add(Row{What: "the price of durable leases (the default): adaptq ÷ adaptq with async_leases, processed jobs/s", Figure: fmt.Sprintf("%.2f×", ar/xr),
		Note: fmt.Sprintf("the default waits for a WAL flush at every Get's commit, as River's fetch does (River keeps synchronous_commit on); adaptq with async_leases ÷ River: %.2f×", xr/rr)})
	calls := median(pick(ad, func(d pgDrain) float64 { return d.calls }))
	acl, asv := cpuMedian(ad)
	rcl, rsv := cpuMedian(rv)
	cpuRatio := float64(rcl+rsv) / float64(acl+asv)
	s.add(Row{What: "CPU per processed job, this process + the PostgreSQL server", Figure: fmt.Sprintf("adaptq %s, River %s: River uses %.2f× adaptq's", usString(acl+asv), usString(rcl+rsv), cpuRatio),
		Note: fmt.Sprintf("adaptq %s client + %s server, River %s + %s (medians; the server's from /proc, every postgres process, autovacuum included): on a machine shared with other work this ratio is steadier than the jobs/s ratio, and a CPU-bound drain's jobs/s go as its inverse", usString(acl), usString(asv), usString(rcl), usString(rsv))})
	s.add(Row{What: "adaptq calls per message (queue calls, meter)", Figure: fmt.Sprintf("%.3f", calls), Target: fmt.Sprintf("≤ %.1f", PostgresCallsTarget), Holds: verdict(calls <= PostgresCallsTarget), Note: ad[len(ad)/2].detail})
	s.add(Row{What: "statements sent per message (pgx tracer)", Figure: fmt.Sprintf("adaptq %.3f, River %.3f", median(pick(ad, func(d pgDrain) float64 { return d.statements })), median(pick(rv, func(d pgDrain) float64 { return d.statements }))),
		Note: "every statement and batch either client's pool sent during the drain, maintenance included"})
	return nil
}

func pgIdleRows(ctx context.Context, e *Env, s *Section, base string) error {
	hours := e.Sizes.IdleHours
	e.logf("postgres: idle adaptq, %d virtual hours", hours)
	calls, stmts, err := pgIdleAdaptq(ctx, base, hours)
	if err != nil {
		return fmt.Errorf("idle adaptq: %w", err)
	}
	e.logf("postgres: idle river, %s", e.Sizes.PostgresIdle)
	riverStmts, err := pgIdleRiver(ctx, base, e.Sizes.PostgresIdle)
	if err != nil {
		return fmt.Errorf("idle river: %w", err)
	}
	s.add(Row{What: "idle worker, queue calls per hour (adaptq: push trigger from NOTIFY, safety interval 5 min)", Figure: fmt.Sprintf("%.1f", calls),
		Target: fmt.Sprintf("≤ %.0f", PostgresIdleCallsTarget), Holds: verdict(calls <= PostgresIdleCallsTarget),
		Note: fmt.Sprintf("%d virtual hours after the backoff reached the safety interval; statements sent, the LISTEN connection's included: %.1f an hour", hours, stmts)})
	s.add(Row{What: "idle River client (its defaults), statements per hour", Figure: fmt.Sprintf("%.0f", riverStmts),
		Note: fmt.Sprintf("counted over %s of real time after a second's start, scaled to an hour: fetch polls, leader election, maintenance", e.Sizes.PostgresIdle)})
	return nil
}

func pgWakeRows(ctx context.Context, e *Env, s *Section, base string) error {
	trials := e.Sizes.PostgresWake
	e.logf("postgres: wake, %d trials", trials)
	lat, after, err := pgWake(ctx, e, base, trials)
	if err != nil {
		return fmt.Errorf("wake: %w", err)
	}
	p99 := percentile(lat, 99)
	s.add(Row{What: "cross-process wake: Put in this process → handler start in a sleeping worker process (NOTIFY → LISTEN → Get)",
		Figure: fmt.Sprintf("p50 %s, p99 %s, max %s (from the Put's return: p50 %s, p99 %s)", ms(percentile(lat, 50)), ms(p99), ms(maxDuration(lat)), ms(percentile(after, 50)), ms(percentile(after, 99))),
		Target: fmt.Sprintf("p99 ≤ %s", ms(PostgresWakeTarget)), Holds: verdict(p99 <= PostgresWakeTarget),
		Note: fmt.Sprintf("%d trials 20–70 ms apart; the worker's one task sleeps (safety interval 5 min) until the driver's notification wakes it; idle.min %s, the listener's trigger floor (with the default 100 ms, a trigger within 100 ms of an empty Get waits for the rest of it, to batch a trickle of billed puts); the time includes the Put's commit (a WAL flush)", trials, pgWakeIdleMin)})
	return nil
}

func pgLongRows(ctx context.Context, e *Env, s *Section, base string) error {
	n := e.Sizes.PostgresLong
	r, err := pgLong(ctx, e, base, n)
	if err != nil {
		return fmt.Errorf("long run: %w", err)
	}
	s.add(Row{What: fmt.Sprintf("long run: %s messages drained from full by the listener", commas(int64(n))), Figure: perSec(r.rate)})
	s.add(Row{What: "long run: n_dead_tup of messages + bodies", Figure: fmt.Sprintf("max %s, at the end %s", commas(r.maxDead), commas(r.end)),
		Note: fmt.Sprintf("%d vacuums of the two tables during the run; size %s before, %s after; %s", r.vacuums, mib(r.sizeBefore/1024), mib(r.sizeAfter/1024), r.traceString())})
	s.add(Row{What: "long run: Get latency, first tenth of the Gets vs last tenth", Figure: fmt.Sprintf("p50 %s → %s, p99 %s → %s", ms(r.firstP50), ms(r.lastP50), ms(r.firstP99), ms(r.lastP99))})
	s.add(Row{What: "one table for many queues: Get on a quiet queue of the same tables", Figure: fmt.Sprintf("p50 %s alone, %s while the long run churns", ms(r.quietAlone), ms(r.quietChurn)),
		Note: "a put, a timed Get and a delete every 100 ms; its index range holds only its own entries, so what it pays during the run is the machine's load, not its neighbour's rows"})
	return nil
}

func pick(ds []pgDrain, f func(pgDrain) float64) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = f(d)
	}
	return out
}

func ratesList(ds []pgDrain) string {
	var b []string
	for _, d := range ds {
		b = append(b, perSec(d.rate))
	}
	return strings.Join(b, ", ")
}
