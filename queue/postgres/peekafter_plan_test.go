package postgres

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/adaptq/adaptq/queue/postgres/pgtest"
)

// A poison listing pages with PeekAfter so that a page costs what its size
// does (issue 26 item 3): the statement must walk the queue's messages in
// id order from the cursor and stop at the page's end. With only
// messages_ready (queue_id, visible_at, id) the server either reads every
// visible message of the queue and sorts them, or walks the primary key
// through every other queue's messages; both read thousands of rows for a
// page of 10 here.
func TestPeekAfterReadsAPageNotTheQueue(t *testing.T) {
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
	const each = 3000
	// work's messages first, then the poison queue's: ids ascend across
	// both, as they do when a busy queue shares the schema.
	for _, qid := range []int32{work.st.id, pois.st.id} {
		if _, err := db.pool.Exec(ctx, `
WITH m AS (
	INSERT INTO `+s+`.messages (queue_id, visible_at, expires_at, inserted_at)
	SELECT $1, now() - interval '1 second', 'infinity', now() FROM generate_series(1, $2)
	RETURNING id
)
INSERT INTO `+s+`.bodies (id, body, queue_id, expires_at) SELECT id, 'x', $1, 'infinity' FROM m`, qid, each); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.pool.Exec(ctx, `ANALYZE `+s+`.messages`); err != nil {
		t.Fatal(err)
	}
	const page = 10
	var plan []byte
	if err := db.pool.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+db.sql.peekAfter,
		db.nowArg(), pois.st.id, page, int64(0)).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var doc []struct{ Plan planNode }
	if err := json.Unmarshal(plan, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("plan %s: %v", plan, err)
	}
	var read float64
	var sorted bool
	var walk func(n planNode)
	walk = func(n planNode) {
		if n.Type == "Sort" || n.Type == "Incremental Sort" {
			sorted = true
		}
		if n.Relation == "messages" {
			read += (n.Rows + n.Removed + n.IndexRemoved) * max(n.Loops, 1)
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(doc[0].Plan)
	if sorted || read > 2*page {
		t.Errorf("a PeekAfter page of %d read %.0f rows of messages (sorted: %v); want at most %d and no sort. Plan: %s",
			page, read, sorted, 2*page, plan)
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
