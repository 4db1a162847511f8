package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
	"github.com/adaptq/adaptq/queue/queuetest"
)

// TestFaults runs the fault layer on the machine's server, each case in a
// schema of its own: queues open through queue.Open with a postgres:// URL
// whose host is the fault proxy's, the path a user's worker takes. The
// Restart case runs on a server of its own (pgtest.StartServer), crashed
// (an immediate shutdown) and recovered.
func TestFaults(t *testing.T) {
	shared := pgtest.URL(t)
	queuetest.RunFaults(t, func(t *testing.T) *queuetest.FaultHarness {
		h := faultHarness(t, shared, pgtest.Schema(t))
		h.Restartable = func(t *testing.T) *queuetest.FaultHarness {
			srv := pgtest.StartServer(t)
			h := faultHarness(t, srv.URL, pgtest.NewSchemaName())
			h.Restart = func(t *testing.T) { srv.Restart(t, true) }
			return h
		}
		return h
	})
}

// faultHarness is the harness for schema on the server at rawURL.
func faultHarness(t *testing.T, rawURL, schema string) *queuetest.FaultHarness {
	base, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := queuetest.NewFaultProxy(t, base.Host)
	proxied := *base
	proxied.Host = proxy.Addr()
	queueURL := func(u url.URL, name string) string {
		q := u.Query()
		q.Set(postgres.ParamQueue, name)
		q.Set(postgres.ParamSchema, schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	check, err := postgres.Open(context.Background(), rawURL, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = check.Close() })
	return &queuetest.FaultHarness{
		Proxy: proxy,
		Open: func(ctx context.Context, name string) (*queue.Queue, error) {
			return queue.Open(ctx, queueURL(proxied, name))
		},
		Direct: func(ctx context.Context, name string) (*queue.Queue, error) {
			return queue.Open(ctx, queueURL(*base, name))
		},
		Stored: func(ctx context.Context, name string) (int, error) {
			return storedRows(ctx, check, name)
		},
		GetWork: func(ctx context.Context, name string) (int, error) {
			return getWork(ctx, check, name)
		},
		// The driver reads the client's clock only to space its own work
		// (TestClientClockOnlyThroughWallNow); this skews that reading.
		Skew:          postgres.SetClientSkew,
		DrainMessages: 2000,
		Features:      features,
	}
}

// storedRows counts the rows of queue name's messages, expired ones
// included, and fails unless each has its body row.
func storedRows(ctx context.Context, db *postgres.DB, name string) (int, error) {
	s := pgx.Identifier{db.Schema()}.Sanitize()
	var states, bodies int
	err := db.Pool().QueryRow(ctx, `
SELECT count(*), count(b.id) FROM `+s+`.messages m
JOIN `+s+`.queues q ON q.id = m.queue_id
LEFT JOIN `+s+`.bodies b ON b.id = m.id
WHERE q.name = $1`, name).Scan(&states, &bodies)
	if err == nil && bodies != states {
		return states, fmt.Errorf("%d message states but %d bodies", states, bodies)
	}
	return states, err
}

// getWork runs the driver's own Get statement for queue name under EXPLAIN
// ANALYZE in a transaction it rolls back, with the generic plan the driver
// uses and the DB's clock, and returns the rows its scans read and
// discarded (rows removed by filter): work, not time.
func getWork(ctx context.Context, db *postgres.DB, name string) (int, error) {
	tx, err := db.Pool().Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
		return 0, err
	}
	var id int32
	if err := tx.QueryRow(ctx, `SELECT id FROM `+pgx.Identifier{db.Schema()}.Sanitize()+`.queues WHERE name = $1`, name).Scan(&id); err != nil {
		return 0, err
	}
	var plan []byte
	if err := tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+postgres.GetSQL(db), postgres.NowArg(db), id, queue.MaxBatchSize, int64(30e6)).Scan(&plan); err != nil {
		return 0, err
	}
	var doc any
	if err := json.Unmarshal(plan, &doc); err != nil {
		return 0, err
	}
	return removedByFilter(doc), nil
}

// removedByFilter sums "Rows Removed by Filter" over every node of an
// EXPLAIN (FORMAT JSON) document.
func removedByFilter(v any) int {
	n := 0
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if k == "Rows Removed by Filter" {
				if f, ok := x.(float64); ok {
					n += int(f)
				}
				continue
			}
			n += removedByFilter(x)
		}
	case []any:
		for _, x := range v {
			n += removedByFilter(x)
		}
	}
	return n
}
