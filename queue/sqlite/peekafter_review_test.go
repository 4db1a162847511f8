package sqlite

import (
	"path/filepath"
	"strings"
	"testing"
)

// A poison listing pages with PeekAfter so that a page costs what its size
// does (issue 26 item 3). The statement must walk the queue's messages in
// id order from the cursor and stop at the page's end: with only the
// messages_ready index (queue_id, visible_at, id) it reads every visible
// message of the queue and sorts them all (a temporary B-tree) for every
// page, so that paging through a poison queue of N messages costs N²/page.
func TestPeekAfterDoesNotSortTheWholeQueue(t *testing.T) {
	t.Parallel()
	db, err := Open(filepath.Join(t.TempDir(), "q.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.r.Query("EXPLAIN QUERY PLAN "+sqlPeekAfter, 1, 0, 10, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if p := strings.Join(plan, "; "); strings.Contains(p, "TEMP B-TREE") || !strings.Contains(p, "id>?") {
		t.Errorf("PeekAfter's plan is %q: it sorts every visible message of the queue for each page", p)
	}
}
