package postgres_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/adaptq/adaptq/queue"
	"github.com/adaptq/adaptq/queue/postgres"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// sqlLog records the SQL of every statement a pool's connections send.
type sqlLog struct {
	mu  sync.Mutex
	sql []string
}

func (l *sqlLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	l.sql = append(l.sql, d.SQL)
	l.mu.Unlock()
	return ctx
}

func (l *sqlLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// relaxed returns how many recorded statements turn synchronous_commit
// off, and forgets them.
func (l *sqlLog) relaxed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.sql {
		if strings.Contains(s, "synchronous_commit") {
			n++
		}
	}
	l.sql = nil
	return n
}

// TestLeasesWaitForTheFlushByDefault (issue 25): Gets and renewals
// committed with synchronous_commit off, so a server crash or a failover
// could undo a lease a consumer was told it holds (two consumers holding
// one message, dequeue counts rolled back). By default no statement the
// driver sends relaxes it now; WithAsyncLeases (async_leases=true) turns
// it off for Gets and renewals only.
func TestLeasesWaitForTheFlushByDefault(t *testing.T) {
	for _, async := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "async_leases"}[async], func(t *testing.T) {
			ctx := context.Background()
			cfg, err := pgxpool.ParseConfig(pgtest.URL(t))
			if err != nil {
				t.Fatal(err)
			}
			log := &sqlLog{}
			cfg.ConnConfig.Tracer = log
			opts := []postgres.Option{postgres.WithSchema(pgtest.Schema(t))}
			if async {
				opts = append(opts, postgres.WithAsyncLeases())
			}
			db, err := postgres.OpenConfig(ctx, cfg, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			q, err := db.Queue(ctx, "lease")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := q.Put(ctx, []byte("x"), queue.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			if n := log.relaxed(); n != 0 {
				t.Fatalf("a Put sent %d statements with synchronous_commit off", n)
			}
			ms, err := q.Get(ctx, 1, time.Minute)
			if err != nil || len(ms) != 1 {
				t.Fatalf("Get: %d, %v", len(ms), err)
			}
			want := map[bool]int{false: 0, true: 1}[async]
			if n := log.relaxed(); n != want {
				t.Fatalf("a Get sent %d statements with synchronous_commit off, want %d", n, want)
			}
			r, err := q.UpdateVisibility(ctx, ms[0].ID, ms[0].PopReceipt, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if n := log.relaxed(); n != want {
				t.Fatalf("a renewal sent %d statements with synchronous_commit off, want %d", n, want)
			}
			if err := q.Delete(ctx, ms[0].ID, r); err != nil {
				t.Fatal(err)
			}
			if n := log.relaxed(); n != 0 {
				t.Fatalf("a Delete sent %d statements with synchronous_commit off", n)
			}
		})
	}
}
