package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/queue/driver"
	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// TestGetLocksRowRewrittenAfterSnapshot: a Get whose snapshot predates the
// commit of another session's Get (variant "taken") or Get and release
// ("released") of the same message, and which reaches the row only then
// (PostgreSQL follows the update chain, locks the newest version and
// rechecks it), never hands out a message another holds, and leaves
// exactly one receipt valid.
func TestGetLocksRowRewrittenAfterSnapshot(t *testing.T) {
	for _, release := range []bool{false, true} {
		name := "taken"
		if release {
			name = "released"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			schema := pgtest.Schema(t)
			c := clock.NewFake(clock.Epoch)
			// db2: the other session. db1: the racing Get, whose
			// visible_at <= now is an operator that waits on an advisory
			// lock the test holds (search_path puts the schema's operator
			// before pg_catalog's).
			db2, err := Open(ctx, pgtest.URL(t), WithSchema(schema), WithClock(c))
			if err != nil {
				t.Fatal(err)
			}
			defer db2.Close()
			s := quoteIdent(schema)
			for _, q := range []string{
				`CREATE FUNCTION ` + s + `.slow_le(a timestamptz, b timestamptz) RETURNS bool LANGUAGE plpgsql VOLATILE AS $$
				BEGIN PERFORM pg_advisory_lock_shared(77001); PERFORM pg_advisory_unlock_shared(77001); RETURN a OPERATOR(pg_catalog.<=) b; END $$`,
				`CREATE OPERATOR ` + s + `.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = ` + s + `.slow_le)`,
			} {
				if _, err := db2.pool.Exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			db1, err := Open(ctx, pgtest.URL(t)+"&options=-c%20search_path%3D"+schema+",pg_catalog", WithSchema(schema), WithClock(c))
			if err != nil {
				t.Fatal(err)
			}
			defer db1.Close()
			q1, _ := db1.queue(ctx, "epq")
			q2, _ := db2.queue(ctx, "epq")
			if _, err := q2.Put(ctx, []byte("x"), driver.PutOptions{TTL: driver.NoExpiry}); err != nil {
				t.Fatal(err)
			}
			ctl, err := db2.pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer ctl.Release()
			if _, err := ctl.Exec(ctx, `SELECT pg_advisory_lock(77001)`); err != nil {
				t.Fatal(err)
			}
			type got struct {
				ms  []*driver.Message
				err error
			}
			ch := make(chan got, 1)
			go func() {
				ms, err := q1.Get(ctx, 1, time.Hour)
				ch <- got{ms, err}
			}()
			for waiting := false; !waiting; {
				if err := ctl.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = 77001 AND NOT granted)`).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Millisecond)
			}
			ms, err := q2.Get(ctx, 1, time.Hour)
			if err != nil || len(ms) != 1 {
				t.Fatalf("the other Get: %v, %v", ms, err)
			}
			held := ms[0]
			if release {
				r, err := q2.UpdateVisibility(ctx, held.ID, held.PopReceipt, 0)
				if err != nil {
					t.Fatal(err)
				}
				held.PopReceipt = r
			}
			if _, err := ctl.Exec(ctx, `SELECT pg_advisory_unlock(77001)`); err != nil {
				t.Fatal(err)
			}
			g := <-ch
			if g.err != nil {
				t.Fatal(g.err)
			}
			t.Logf("racing Get: %d messages", len(g.ms))
			if len(g.ms) > 0 && !release {
				t.Fatalf("the racing Get took a message the other session holds: %+v", g.ms[0])
			}
			valid := held
			if len(g.ms) > 0 {
				valid = g.ms[0]
				if err := q2.Delete(ctx, held.ID, held.PopReceipt); err == nil {
					t.Fatal("the released receipt still deletes after the racing Get took the message")
				}
			}
			if err := q2.Delete(ctx, valid.ID, valid.PopReceipt); err != nil {
				t.Fatalf("delete with the valid receipt: %v", err)
			}
			if n, err := q2.Count(ctx); err != nil || n != 0 {
				t.Fatalf("Count: %d, %v", n, err)
			}
		})
	}
}
