package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/azure"
	"github.com/adaptq/adaptq/queue/azure/azuritetest"
	"github.com/adaptq/adaptq/queue/memory"
	"github.com/adaptq/adaptq/queue/meter"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
	"github.com/adaptq/adaptq/queue/redis"
	"github.com/adaptq/adaptq/queue/sqlite"
	"github.com/adaptq/adaptq/queue/sqs"
	"github.com/adaptq/adaptq/queue/sqs/sqstest"
)

// SQSPipelineBatchTarget: billed calls per message of SQS's whole
// pipeline with batch puts: put 1/10 + receive 1/10 + batch delete 1/10
// is 0.3, and the drain's tail of empty receives must stay under 0.05
// (issue 29's goal).
const SQSPipelineBatchTarget = 0.35

// putBatchProducers is how many producers put in each run, one call in
// flight each: the CLI's enqueue.
const putBatchProducers = 8

// putEngine opens fresh queues of one engine for the batch-put section.
type putEngine struct {
	name string
	// open opens a fresh queue with opts; the queue is closed by the
	// caller, and stop releases the engine.
	open func(ctx context.Context, name string, opts ...queue.Option) (*queue.Queue, error)
	stop func()
	sqs  *sqs.Client // the SQS engine's, for the pipeline rows
	// scale multiplies the section's message count: the memory driver
	// puts 3,000 in a few milliseconds, too short to time on a shared
	// machine.
	scale int
}

// putRun is one timed fill of n messages: with Put (one call a message)
// or PutBatch (batches of Features().MaxBatch).
type putRun struct {
	took time.Duration
	snap meter.Snapshot
}

// fillBatches puts n messages with producers, each calling PutBatch with
// batches of the driver's largest, and fails on any message's error.
func fillBatches(ctx context.Context, q *queue.Queue, n, producers int, body []byte) error {
	chunk := q.Features().MaxBatch
	var next atomic.Int64
	var g errgroup.Group
	for range producers {
		g.Go(func() error {
			msgs := make([]queue.PutMessage, 0, chunk)
			for {
				start := int(next.Add(int64(chunk))) - chunk
				if start >= n {
					return nil
				}
				msgs = msgs[:0]
				for i := start; i < min(start+chunk, n); i++ {
					msgs = append(msgs, queue.PutMessage{Body: body})
				}
				res, err := q.PutBatch(ctx, msgs)
				if err != nil {
					return err
				}
				for _, r := range res {
					if r.Err != nil {
						return r.Err
					}
				}
			}
		})
	}
	return g.Wait()
}

func putBatchSection(ctx context.Context, e *Env, s *Section) error {
	n, rounds := e.Sizes.PutBatch, e.Sizes.PutBatchRounds
	s.how("Every engine, one after another, on this machine (PostgreSQL and Redis on loopback, fauxqs %s and Azurite %s "+
		"started as their tests start them). Each run puts %s messages (the memory driver 20 times as many) of %d bytes into a fresh queue from %d producers, "+
		"one call in flight each: **Put** (one message a call) or **PutBatch** (batches of the driver's largest, "+
		"Features().MaxBatch: 32, SQS 10; one backend call each where the driver has a batch put: memory under one lock, "+
		"SQLite in one transaction, PostgreSQL in one statement, Redis in one script, SQS one SendMessageBatch; Azure "+
		"has none, so PutBatch makes one Put per message, up to 32 at once). Put and PutBatch alternate, %d round%s "+
		"each; the rate is all messages over all time of each. A cost meter counts each side's calls, billed as the "+
		"backend bills them (SQS: each 64 KiB of a call's payload is one request).",
		sqstest.Version, azuritetest.Version, commas(int64(n)), len(jsonBody), putBatchProducers, rounds, plural(rounds))
	s.how("**SQS whole pipeline**: %s messages put with PutBatch, then drained by the listener (%d tasks receiving 10, "+
		"batch deletes of 10, as in section SQS), counted until it has shut down: billed requests per message deleted, "+
		"next to the same pipeline with Put.", commas(int64(e.Sizes.SQS)), sqsWorkers)

	engines, err := putEngines(ctx, e)
	defer func() {
		for _, en := range engines {
			en.stop()
		}
	}()
	if err != nil {
		return err
	}
	seq := 0
	for _, en := range engines {
		n := n * max(en.scale, 1)
		var put, batch []putRun
		for r := range rounds {
			for k := range 2 {
				useBatch := (r+k)%2 == 1
				seq++
				m := meter.New(0)
				q, err := en.open(ctx, fmt.Sprintf("putbatch-%d-%d", time.Now().UnixNano()%1e6, seq), queue.WithObserver(m))
				if err != nil {
					return fmt.Errorf("%s: %w", en.name, err)
				}
				t0 := time.Now()
				if useBatch {
					err = fillBatches(ctx, q, n, putBatchProducers, jsonBody)
				} else {
					err = fillParallel(ctx, q, n, putBatchProducers, jsonBody)
				}
				took := time.Since(t0)
				snap := m.Snapshot()
				cerr := q.Clear(ctx)
				q.Close()
				if err != nil {
					return fmt.Errorf("%s: %w", en.name, err)
				}
				if cerr != nil {
					return fmt.Errorf("%s: clear: %w", en.name, cerr)
				}
				if snap.MessagesPut != int64(n) {
					return fmt.Errorf("%s: put %d of %d", en.name, snap.MessagesPut, n)
				}
				run := putRun{took: took, snap: snap}
				if useBatch {
					batch = append(batch, run)
				} else {
					put = append(put, run)
				}
			}
		}
		pr, br := putRate(put, n), putRate(batch, n)
		pc, bc := putBilled(put), putBilled(batch)
		e.logf("putbatch: %s: Put %s, PutBatch %s", en.name, perSec(pr), perSec(br))
		s.add(Row{
			What:   fmt.Sprintf("%s: PutBatch vs Put, %d producers, %s messages a run", en.name, putBatchProducers, commas(int64(n))),
			Figure: fmt.Sprintf("%.1f× (%s vs %s)", br/pr, perSec(br), perSec(pr)),
			Note:   fmt.Sprintf("billed calls per message: PutBatch %.3f, Put %.3f", bc, pc),
		})
	}
	for _, en := range engines {
		if en.sqs != nil {
			return sqsPipelineRows(ctx, e, s, en.sqs)
		}
	}
	return nil
}

func putRate(runs []putRun, n int) float64 {
	var d time.Duration
	for _, r := range runs {
		d += r.took
	}
	return rate(n*len(runs), d)
}

func putBilled(runs []putRun) float64 {
	var billed, put int64
	for _, r := range runs {
		billed += r.snap.Billed()
		put += r.snap.MessagesPut
	}
	return float64(billed) / float64(put)
}

// putEngines opens every engine the section measures; an engine that is
// not there (no PostgreSQL, no Redis, no emulator) fails the section, as
// the other sections do.
func putEngines(ctx context.Context, e *Env) ([]putEngine, error) {
	var out []putEngine
	mem := memory.NewStore()
	out = append(out, putEngine{name: "memory", stop: func() {}, scale: 20,
		open: func(_ context.Context, name string, opts ...queue.Option) (*queue.Queue, error) {
			return mem.Queue(name, opts...)
		}})

	dir, err := e.tempDir("putbatch")
	if err != nil {
		return out, err
	}
	db, err := sqlite.Open(filepath.Join(dir, "putbatch.db"))
	if err != nil {
		return out, err
	}
	out = append(out, putEngine{name: "SQLite", stop: func() { db.Close() },
		open: func(_ context.Context, name string, opts ...queue.Option) (*queue.Queue, error) {
			return db.Queue(name, opts...)
		}})

	base, err := pgtest.Find()
	if err != nil {
		return out, fmt.Errorf("no PostgreSQL server (set %s): %w", pgtest.EnvURL, err)
	}
	schema := pgtest.NewSchemaName()
	pg, err := postgres.Open(ctx, base, postgres.WithSchema(schema))
	if err != nil {
		return out, err
	}
	out = append(out, putEngine{name: "PostgreSQL", stop: func() { pg.Close(); _ = pgtest.Drop(base, schema) },
		open: func(ctx context.Context, name string, opts ...queue.Option) (*queue.Queue, error) {
			return pg.Queue(ctx, name, opts...)
		}})

	opt, err := goredis.ParseURL(redisURL())
	if err != nil {
		return out, fmt.Errorf("%s: %w", RedisURLEnv, err)
	}
	rdb := goredis.NewClient(opt)
	rc := redis.New(rdb, redis.WithKeyPrefix(fmt.Sprintf("adaptqbench-putbatch:%d:", time.Now().UnixNano())))
	out = append(out, putEngine{name: "Redis", stop: func() { rc.Close(); rdb.Close() },
		open: func(_ context.Context, name string, opts ...queue.Option) (*queue.Queue, error) {
			return rc.Queue(name, opts...)
		}})

	srv, err := sqstest.Launch()
	if err != nil {
		return out, fmt.Errorf("%w: %v", errNoFauxqs, err)
	}
	sc, err := sqs.NewClient(ctx, sqs.Config{Region: sqstest.NewRegion(), Account: sqstest.Account, Endpoint: srv.Endpoint})
	if err != nil {
		srv.Stop()
		return out, err
	}
	out = append(out, putEngine{name: "SQS (fauxqs)", stop: func() { sc.Close(); srv.Stop() }, sqs: sc,
		open: func(ctx context.Context, name string, opts ...queue.Option) (*queue.Queue, error) {
			return sc.Queue(ctx, name, opts...)
		}})

	az, err := azuritetest.Launch()
	if err != nil {
		return out, fmt.Errorf("%w: %v", errNoAzurite, err)
	}
	acct, err := azure.NewAccount(azure.Config{Account: azuritetest.Account, QueueEndpoint: az.QueueEndpoint, BlobEndpoint: az.BlobEndpoint})
	if err != nil {
		az.Stop()
		return out, err
	}
	out = append(out, putEngine{name: "Azure (Azurite)", stop: func() { acct.Close(); az.Stop() },
		open: func(ctx context.Context, name string, opts ...queue.Option) (*queue.Queue, error) {
			return acct.Queue(ctx, name, opts...)
		}})
	return out, nil
}

// sqsPipelineRows measures SQS's whole pipeline, put + receive + delete,
// with PutBatch and with Put, on queues of their own.
func sqsPipelineRows(ctx context.Context, e *Env, s *Section, c *sqs.Client) error {
	n := e.Sizes.SQS
	for _, batch := range []bool{true, false} {
		m := meter.New(sqs.PricePer10k)
		name := "pipeline-put"
		if batch {
			name = "pipeline-batch"
		}
		q, err := c.Queue(ctx, name, queue.WithObserver(m))
		if err != nil {
			return err
		}
		if batch {
			err = fillBatches(ctx, q, n, sqsFillProducers, smallBody)
		} else {
			err = fillParallel(ctx, q, n, sqsFillProducers, smallBody)
		}
		if err == nil {
			_, err = sqsListenerDrain(ctx, q, n)
		}
		q.Close()
		if err != nil {
			return err
		}
		snap := m.Snapshot()
		if snap.MessagesDeleted != int64(n) {
			return errors.New("sqs pipeline: not every message was deleted")
		}
		cpm := float64(snap.Billed()) / float64(n)
		row := Row{Figure: fmt.Sprintf("%.3f requests/message", cpm), Note: breakdown(snap)}
		if batch {
			row.What = "SQS whole pipeline with PutBatch: put/10 + receive/10 + batch delete/10"
			row.Target = fmt.Sprintf("≤ %.2f", SQSPipelineBatchTarget)
			row.Holds = verdict(cpm <= SQSPipelineBatchTarget)
		} else {
			row.What = "SQS whole pipeline with Put: put + receive/10 + batch delete/10 (for comparison)"
		}
		e.logf("putbatch: %s: %s", row.What, row.Figure)
		s.add(row)
	}
	return nil
}
