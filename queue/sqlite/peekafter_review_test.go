package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// A poison listing pages with PeekAfter so that a page costs what its size
// does (issue 26 item 3). The statement must walk messages in id order from
// the cursor and stop at the page's end: with the messages_ready index
// (queue_id, visible_at, id) it reads every visible message of the queue and
// sorts them all (a temporary B-tree) for every page, so that paging through
// a poison queue of N messages costs N²/page. Here the poison queue holds
// 3,010 messages above a work queue's 3,000, with the file ANALYZEd, and
// the pages asked for start inside the poison queue: the plan must search
// the rowid from the cursor (rowid>?) with no sort, so that the LIMIT ends
// the walk after a page. (The first page, from "", walks past the work
// queue's 3,000 messages below it: that is the documented cost of having no
// index (queue_id, id).)
func TestPeekAfterDoesNotSortTheWholeQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := Open(filepath.Join(t.TempDir(), "q.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	work, err := db.queue("work")
	if err != nil {
		t.Fatal(err)
	}
	pois, err := db.queue("work-poison")
	if err != nil {
		t.Fatal(err)
	}
	now := pois.now()
	fill := func(qid int64, n int) {
		t.Helper()
		for _, stmt := range []string{
			`INSERT INTO messages (queue_id, inserted_at, visible_at, expires_at)
			 WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?2)
			 SELECT ?1, ?3 - 1000, ?3 - 1000, 9223372036854775807 FROM s`,
			`INSERT INTO bodies (id, body) SELECT id, X'78' FROM messages WHERE queue_id = ?1`,
		} {
			if _, err := db.w.ExecContext(ctx, stmt, qid, n, now); err != nil {
				t.Fatal(err)
			}
		}
	}
	fill(work.qid, 3000)
	fill(pois.qid, 3010)
	if _, err := db.w.ExecContext(ctx, "ANALYZE"); err != nil {
		t.Fatal(err)
	}
	var first int64
	if err := db.w.QueryRowContext(ctx, "SELECT min(id) FROM messages WHERE queue_id = ?", pois.qid).Scan(&first); err != nil {
		t.Fatal(err)
	}
	const page = 10
	// After the first listed message (page 2), and after the 3,000th (the
	// last page).
	for _, cursor := range []int64{first, first + 2999} {
		rows, err := db.r.QueryContext(ctx, "EXPLAIN QUERY PLAN "+sqlPeekAfter, pois.qid, now, page, cursor)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		p := strings.Join(plan, "; ")
		if strings.Contains(p, "TEMP B-TREE") || !strings.Contains(p, "SEARCH m USING INTEGER PRIMARY KEY (rowid>?)") {
			t.Errorf("after %d, PeekAfter's plan is %q: it must walk messages' rowid from the cursor, not read and sort the queue's 3,010 messages for a page of %d",
				cursor, p, page)
		}
		// And the page is the poison queue's, in id order.
		ms, err := pois.PeekAfter(ctx, fmt.Sprint(cursor), page)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != page || ms[0].ID != fmt.Sprint(cursor+1) || ms[page-1].ID != fmt.Sprint(cursor+page) {
			t.Errorf("PeekAfter(%d, %d): %d messages, want ids %d…%d", cursor, page, len(ms), cursor+1, cursor+page)
		}
	}
	ms, err := pois.PeekAfter(ctx, "", page)
	if err != nil || len(ms) != page || ms[0].ID != fmt.Sprint(first) {
		t.Errorf("PeekAfter(\"\", %d): %d messages (%v), want the poison queue's first %d from id %d", page, len(ms), err, page, first)
	}
}
