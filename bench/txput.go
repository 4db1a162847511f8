package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// TxPutRatioTarget is issue 30's goal: adaptq's enqueue in the
// application's transaction commits at least 1.5× River's InsertTx.
const TxPutRatioTarget = 1.5

// txProducers is how many goroutines commit transactions on each side:
// one per connection of the pool (pgPoolConns).
const txProducers = pgPoolConns

// txRun is one timed run of one side: rate committed transactions a
// second.
type txRun struct {
	rate  float64
	stmts float64 // statements (round trips) per transaction, BEGIN and COMMIT included
	cpu   cpuSpan // over the run
	n     int
}

// perTx is the run's client and server CPU per transaction.
func (r txRun) perTx() (client, server time.Duration) {
	return r.cpu.client / time.Duration(r.n), r.cpu.server / time.Duration(r.n)
}

// measuredTxLoop is txLoop with the pool's statements (calls) and the CPU
// of this process and the server counted over it.
func measuredTxLoop(ctx context.Context, begin func(context.Context) (pgx.Tx, error), calls *callTracer, n int, write func(context.Context, pgx.Tx) error) (txRun, error) {
	var run txRun
	c0 := calls.n.Load()
	span, err := measureCPU(func() error {
		var err error
		run, err = txLoop(ctx, begin, n, write)
		return err
	})
	run.cpu, run.n = span, n
	run.stmts = float64(calls.n.Load()-c0) / float64(n)
	return run, err
}

// txLoop commits n transactions with producers goroutines, each
// transaction begun on pool, running write(tx) and committed; it returns
// the rate.
func txLoop(ctx context.Context, begin func(context.Context) (pgx.Tx, error), n int, write func(context.Context, pgx.Tx) error) (txRun, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, txProducers)
	start := time.Now()
	for range txProducers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				tx, err := begin(ctx)
				if err != nil {
					errc <- err
					return
				}
				if err := write(ctx, tx); err != nil {
					_ = tx.Rollback(ctx)
					errc <- err
					return
				}
				if err := tx.Commit(ctx); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	close(errc)
	for err := range errc {
		return txRun{}, err
	}
	return txRun{rate: float64(n) / el.Seconds()}, nil
}

// batchLoop is txLoop for transactions sent as one pgx.Batch each
// (BEGIN … COMMIT in one round trip), built by fill.
func batchLoop(ctx context.Context, pool interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}, calls *callTracer, n int, fill func(*pgx.Batch) error) (txRun, error) {
	var run txRun
	c0 := calls.n.Load()
	span, err := measureCPU(func() error {
		var next atomic.Int64
		var wg sync.WaitGroup
		errc := make(chan error, txProducers)
		start := time.Now()
		for range txProducers {
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					b := &pgx.Batch{}
					b.Queue("BEGIN")
					if err := fill(b); err != nil {
						errc <- err
						return
					}
					b.Queue("COMMIT")
					if err := pool.SendBatch(ctx, b).Close(); err != nil {
						errc <- err
						return
					}
				}
			})
		}
		wg.Wait()
		run.rate = float64(n) / time.Since(start).Seconds()
		close(errc)
		for err := range errc {
			return err
		}
		return nil
	})
	run.cpu, run.n = span, n
	run.stmts = float64(calls.n.Load()-c0) / float64(n)
	return run, err
}

// orderNote is the application row's payload, as large as the message.
var orderNote = string(pgBody)

// txPutSection compares enqueueing in the application's own transaction:
// each transaction inserts one application row and enqueues one job of
// 200 bytes, then commits; adaptq with postgres.PutTx, River with its
// client's InsertTx. Each side has its schema in the same database, a pool
// of pgPoolConns connections and one producer per connection.
func txPutSection(ctx context.Context, e *Env, s *Section) error {
	base, err := pgtest.Find()
	if err != nil {
		return fmt.Errorf("no PostgreSQL server (set %s): %w", pgtest.EnvURL, err)
	}
	n, repeats := e.Sizes.TxPut, e.Sizes.Repeats
	s.how("Each transaction: BEGIN, one INSERT of an application row (an orders table with a 200-byte text column, in the side's own schema), one enqueue of a 200-byte job, COMMIT. "+
		"adaptq: `postgres.PutTx` (one statement: the message, its body and its counter; the first put of each 5 ms notifies in it, the others are watched to their commit). River %s: `Client.InsertTx` of an insert-only client (riverpgxv5). "+
		"Both in fresh schemas of the same database, synchronous_commit as the server has it, pools of %d connections, %d producers each; %s transactions per run, %d runs of each side alternating (median), after a warm-up of 500 each.",
		riverVersion, pgPoolConns, txProducers, commas(int64(n)), repeats)
	s.how("Command: `cd bench && go run ./cmd/benchreport -only txput -o -` (`-txput N -repeats R` to size it).")

	a, err := openPGSide(ctx, base, nil)
	if err != nil {
		return err
	}
	defer a.close()
	aOrders := pgx.Identifier{a.schema, "orders"}.Sanitize()
	if _, err := a.db.Pool().Exec(ctx, `CREATE TABLE `+aOrders+` (id bigserial PRIMARY KEY, note text NOT NULL)`); err != nil {
		return err
	}
	r, err := openRiverSide(ctx, base)
	if err != nil {
		return err
	}
	defer r.close()
	rOrders := pgx.Identifier{r.schema, "orders"}.Sanitize()
	if _, err := r.pool.Exec(ctx, `CREATE TABLE `+rOrders+` (id bigserial PRIMARY KEY, note text NOT NULL)`); err != nil {
		return err
	}
	rc, err := r.client(&river.Config{})
	if err != nil {
		return err
	}
	args := riverArgs{Body: string(pgBody)}

	adaptqTx := func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO `+aOrders+` (note) VALUES ($1)`, orderNote); err != nil {
			return err
		}
		_, err := postgres.PutTx(ctx, tx, a.q, pgBody, queue.PutOptions{})
		return err
	}
	riverTx := func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO `+rOrders+` (note) VALUES ($1)`, orderNote); err != nil {
			return err
		}
		_, err := rc.InsertTx(ctx, tx, args, nil)
		return err
	}
	if _, err := txLoop(ctx, a.db.Pool().Begin, 500, adaptqTx); err != nil {
		return fmt.Errorf("adaptq warm-up: %w", err)
	}
	if _, err := txLoop(ctx, r.pool.Begin, 500, riverTx); err != nil {
		return fmt.Errorf("river warm-up: %w", err)
	}
	adaptqBatch := func(b *pgx.Batch) error {
		b.Queue(`INSERT INTO `+aOrders+` (note) VALUES ($1)`, orderNote)
		return postgres.QueuePut(ctx, b, a.q, pgBody, queue.PutOptions{}, nil)
	}
	var ar, rr, br []float64
	var aRuns, rRuns, bRuns []txRun
	for i := range repeats {
		e.logf("txput: run %d/%d: adaptq", i+1, repeats)
		x, err := measuredTxLoop(ctx, a.db.Pool().Begin, a.calls, n, adaptqTx)
		if err != nil {
			return fmt.Errorf("adaptq: %w", err)
		}
		e.logf("txput: run %d/%d: river", i+1, repeats)
		y, err := measuredTxLoop(ctx, r.pool.Begin, r.calls, n, riverTx)
		if err != nil {
			return fmt.Errorf("river: %w", err)
		}
		e.logf("txput: adaptq %s, river %s (%.2f×)", perSec(x.rate), perSec(y.rate), x.rate/y.rate)
		e.logf("txput: run %d/%d: adaptq, one batch per transaction", i+1, repeats)
		z, err := batchLoop(ctx, a.db.Pool(), a.calls, n, adaptqBatch)
		if err != nil {
			return fmt.Errorf("adaptq batch: %w", err)
		}
		e.logf("txput: adaptq batched %s (%.2f× River)", perSec(z.rate), z.rate/y.rate)
		ar, rr, br = append(ar, x.rate), append(rr, y.rate), append(br, z.rate)
		aRuns, rRuns, bRuns = append(aRuns, x), append(rRuns, y), append(bRuns, z)
	}
	list := func(xs []float64) string {
		out := ""
		for i, x := range xs {
			if i > 0 {
				out += ", "
			}
			out += perSec(x)
		}
		return "runs: " + out
	}
	// median sorts its argument: the pairs are taken first.
	var bpairs []float64
	for i := range br {
		bpairs = append(bpairs, br[i]/rr[i])
	}
	// The ratio is the median of each run's pair (adaptq's run and the
	// River run right after it): on a shared machine whose load drifts,
	// a pair sees the same load more nearly than the two medians do.
	var pairs []float64
	for i := range ar {
		pairs = append(pairs, ar[i]/rr[i])
	}
	ratio := median(pairs)
	am, rm := median(ar), median(rr)
	s.add(Row{What: "adaptq: row + postgres.PutTx + commit, committed transactions/s", Figure: perSec(am), Note: list(ar)})
	s.add(Row{What: "River " + riverVersion + ": row + InsertTx + commit, committed transactions/s", Figure: perSec(rm), Note: list(rr)})
	ps := ""
	for i, p := range pairs {
		if i > 0 {
			ps += ", "
		}
		ps += fmt.Sprintf("%.2f", p)
	}
	s.add(Row{What: "adaptq ÷ River, committed transactions/s (median of the runs' pairs)", Figure: fmt.Sprintf("%.2f×", ratio),
		Target: fmt.Sprintf("≥ %.1f×", TxPutRatioTarget), Holds: verdict(ratio >= TxPutRatioTarget), Note: "pairs: " + ps})
	cpu := func(rs []txRun) (client, server time.Duration, stmts float64) {
		var cs, ss, st []float64
		for _, r := range rs {
			c, sv := r.perTx()
			cs, ss, st = append(cs, float64(c)), append(ss, float64(sv)), append(st, r.stmts)
		}
		return time.Duration(median(cs)), time.Duration(median(ss)), median(st)
	}
	bratio := median(bpairs)
	s.add(Row{What: "adaptq, the same transaction as one pgx.Batch (BEGIN, row, postgres.QueuePut, COMMIT: one round trip), committed transactions/s", Figure: perSec(median(br)), Note: list(br)})
	s.add(Row{What: "adaptq one-batch transaction ÷ River InsertTx (median of the runs' pairs; River's InsertTx needs the pgx.Tx, so it cannot ride in the batch)", Figure: fmt.Sprintf("%.2f×", bratio),
		Target: fmt.Sprintf("≥ %.1f×", TxPutRatioTarget), Holds: verdict(bratio >= TxPutRatioTarget)})
	acl, asv, ast := cpu(aRuns)
	rcl, rsv, rst := cpu(rRuns)
	_, _, bst := cpu(bRuns)
	s.add(Row{What: "statements (round trips) per transaction, BEGIN and COMMIT included", Figure: fmt.Sprintf("adaptq %.2f, River %.2f, adaptq one batch %.2f", ast, rst, bst),
		Note: "adaptq's beyond 4 (or 1) are its commit watch: one batch per notify interval (5 ms) waits for the transactions whose puts did not notify, then notifies"})
	s.add(Row{What: "CPU per transaction, this process + the PostgreSQL server", Figure: fmt.Sprintf("adaptq %s + %s, River %s + %s", usString(acl), usString(asv), usString(rcl), usString(rsv)),
		Note: "the server's CPU is every backend's, other users of the server included"})
	return nil
}
