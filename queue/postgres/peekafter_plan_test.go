package postgres

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// A poison listing pages with PeekAfter so that a page costs what its size
// does (issue 26 item 3): the statement must walk messages in id order from
// the cursor and stop at the page's end. From messages_ready (queue_id,
// visible_at, id) the server reads every visible message of the queue and
// sorts them for each page; main's statement did when the statistics
// underrated the queue, as here: a work queue's 3,000 messages are
// ANALYZEd, then its poison queue fills with 3,010 (autovacuum off, so the
// statistics stay as they were): main's statement then read the poison
// queue's 3,009 messages above the cursor and sorted them, under the custom
// and the generic plan alike. The pages asked for start inside the poison queue (after its first message, and after its
// 3,000th), under the custom and the generic plan: each must read about a
// page of messages and of bodies, and sort nothing. (The first page, from
// "", walks past the work queue's 3,000 messages below it: the documented
// cost of having no index (queue_id, id).)
func TestPeekAfterReadsAPageNotTheQueue(t *testing.T) { testPeekAfterReadsAPage(t, true) }

// TestPeekAfterReadsAPageOfANeverAnalyzedTable: with no statistics at all
// (a new schema whose tables autovacuum has not analyzed yet), the
// planner took a bitmap scan of every message above the cursor and
// sorted them (3009 rows read for a page of 10), unless PeekAfter's
// transaction turns the sort off (peekAfterPlanner).
func TestPeekAfterReadsAPageOfANeverAnalyzedTable(t *testing.T) { testPeekAfterReadsAPage(t, false) }

func testPeekAfterReadsAPage(t *testing.T, analyze bool) {
	ctx := context.Background()
	db, err := Open(ctx, pgtest.URL(t), WithSchema(pgtest.Schema(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	work, err := db.queue(ctx, "work")
	if err != nil {
		t.Fatal(err)
	}
	pois, err := db.queue(ctx, "work-poison")
	if err != nil {
		t.Fatal(err)
	}
	s := quoteIdent(db.schema)
	if _, err := db.pool.Exec(ctx, `ALTER TABLE `+s+`.messages SET (autovacuum_enabled = off);
ALTER TABLE `+s+`.bodies SET (autovacuum_enabled = off)`); err != nil {
		t.Fatal(err)
	}
	fill := func(qid int32, n int) {
		t.Helper()
		if _, err := db.pool.Exec(ctx, `
WITH m AS (
	INSERT INTO `+s+`.messages (queue_id, visible_at, expires_at, inserted_at)
	SELECT $1, now() - interval '1 second', 'infinity', now() FROM generate_series(1, $2)
	RETURNING id
)
INSERT INTO `+s+`.bodies (id, body, queue_id, expires_at) SELECT id, 'x', $1, 'infinity' FROM m`, qid, n); err != nil {
			t.Fatal(err)
		}
	}
	fill(work.st.id, 3000)
	if analyze {
		if _, err := db.pool.Exec(ctx, `ANALYZE `+s+`.messages; ANALYZE `+s+`.bodies`); err != nil {
			t.Fatal(err)
		}
	}
	fill(pois.st.id, 3010)
	var first int64
	if err := db.pool.QueryRow(ctx, `SELECT min(id) FROM `+s+`.messages WHERE queue_id = $1`, pois.st.id).Scan(&first); err != nil {
		t.Fatal(err)
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	const page = 10
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
			t.Fatal(err)
		}
		for _, cursor := range []int64{first, first + 2999} {
			// As PeekAfter runs it: in a transaction, after peekAfterPlanner.
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, peekAfterPlanner); err != nil {
				t.Fatal(err)
			}
			var plan []byte
			err = tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+db.sql.peekAfter,
				db.nowArg(), pois.st.id, page, cursor).Scan(&plan)
			_ = tx.Rollback(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var doc []struct{ Plan planNode }
			if err := json.Unmarshal(plan, &doc); err != nil || len(doc) != 1 {
				t.Fatalf("plan %s: %v", plan, err)
			}
			read := map[string]float64{}
			var sorted bool
			var walk func(n planNode)
			walk = func(n planNode) {
				if n.Type == "Sort" || n.Type == "Incremental Sort" {
					sorted = true
				}
				if n.Relation != "" {
					read[n.Relation] += (n.Rows + n.Removed + n.IndexRemoved) * max(n.Loops, 1)
				}
				for _, c := range n.Plans {
					walk(c)
				}
			}
			walk(doc[0].Plan)
			if sorted || read["messages"] > 2*page || read["bodies"] > 2*page {
				t.Errorf("%s, after %d: a PeekAfter page of %d read %.0f rows of messages and %.0f of bodies (sorted: %v); want at most %d each and no sort. Plan: %s",
					mode, cursor, page, read["messages"], read["bodies"], sorted, 2*page, plan)
			}
		}
	}
	if _, err := conn.Exec(ctx, "RESET plan_cache_mode"); err != nil {
		t.Fatal(err)
	}
}

// planNode is the part of a node of EXPLAIN (ANALYZE, FORMAT JSON) the
// test reads.
type planNode struct {
	Type         string     `json:"Node Type"`
	Relation     string     `json:"Relation Name"`
	Rows         float64    `json:"Actual Rows"`
	Loops        float64    `json:"Actual Loops"`
	Removed      float64    `json:"Rows Removed by Filter"`
	IndexRemoved float64    `json:"Rows Removed by Index Recheck"`
	Plans        []planNode `json:"Plans"`
}
