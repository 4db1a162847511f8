package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// maxPutGroup bounds how many concurrent Puts one transaction writes: the
// gain flattens out well before it (groups are as large as the number of
// producers waiting), and the bound keeps a transaction of 64 KiB bodies
// at a few megabytes.
const maxPutGroup = 128

// A Put that returns has been committed, and a commit (writing the WAL
// frames and their checksums) costs several times an insert. Concurrent Puts
// therefore share commits, as in LevelDB's write queue: they line up in
// putGroup, the one at the front writes itself and every Put behind it
// (up to maxPutGroup) in one transaction, wakes them with their ids, and
// hands the front to the next in line. A lone Put is a transaction of its
// own; no goroutine is started.
type putGroup struct {
	mu   sync.Mutex
	line []*putReq // line[0] is writing or about to; taken ones form a prefix
}

// putReq is one Put in line.
type putReq struct {
	qid, insertedAt, visibleAt, expiresAt int64
	body                                  []byte
	meta                                  []byte // EncodeMetadata's; nil for none

	taken bool          // in a transaction being written (under putGroup.mu)
	done  bool          // id and err are set; written before wake is sent
	id    int64         //
	err   error         //
	wake  chan struct{} // cap 1: "done" for a follower, "your turn" for the new front
}

// put writes r, alone or with the Puts queued behind it, and returns its
// id. A Put whose ctx ends while it waits in line leaves without being
// written; once taken into a transaction it waits for the commit.
func (db *DB) put(ctx context.Context, r *putReq) (int64, error) {
	g := &db.puts
	r.wake = make(chan struct{}, 1)
	g.mu.Lock()
	g.line = append(g.line, r)
	front := len(g.line) == 1
	g.mu.Unlock()
	if !front {
		select {
		case <-r.wake:
		case <-ctx.Done():
			if g.leave(r) {
				return 0, ctx.Err()
			}
			<-r.wake // taken: the commit is under way
		}
		if r.done {
			return r.id, r.err
		}
		// Woken as the new front: write the group.
	}
	db.writeGroup()
	return r.id, r.err
}

// leave takes r, not yet taken, out of the line and reports true; if r is
// already in a transaction it reports false.
func (g *putGroup) leave(r *putReq) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r.taken {
		return false
	}
	for i, x := range g.line {
		if x == r {
			g.line = append(g.line[:i], g.line[i+1:]...)
			if i == 0 && len(g.line) > 0 {
				g.line[0].wake <- struct{}{} // r was to write next: pass it on
			}
			break
		}
	}
	return true
}

// writeGroup is run by the Put at the front of the line: it writes the
// front group in one transaction, wakes its members and the next front.
func (db *DB) writeGroup() {
	g := &db.puts
	g.mu.Lock()
	n := min(len(g.line), maxPutGroup)
	group := make([]*putReq, n)
	copy(group, g.line)
	for _, r := range group {
		r.taken = true
	}
	g.mu.Unlock()

	ids, err := db.insert(group)

	g.mu.Lock()
	g.line = g.line[n:] // the group is the prefix: taken Puts never leave
	if len(g.line) > 0 {
		g.line[0].wake <- struct{}{}
	} else {
		g.line = nil // let the backing array go
	}
	g.mu.Unlock()
	for i, r := range group {
		if err != nil {
			r.err = err
		} else {
			r.id = ids[i]
		}
		r.done = true
		if i > 0 { // group[0] is the caller
			r.wake <- struct{}{}
		}
	}
}

// insert writes the group in one transaction and returns the new ids. It
// does not watch any caller's context: the group's members are waiting for
// it, and the busy timeout bounds it.
func (db *DB) insert(group []*putReq) ([]int64, error) {
	ctx := context.Background()
	ids := make([]int64, len(group))
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	put, putBody := tx.StmtContext(ctx, db.st.put), tx.StmtContext(ctx, db.st.putBody)
	var putMeta *sql.Stmt // prepared in the transaction for the first message with metadata
	for i, r := range group {
		res, err := put.ExecContext(ctx, r.qid, r.insertedAt, r.visibleAt, r.expiresAt)
		if err != nil {
			return nil, err
		}
		if ids[i], err = res.LastInsertId(); err != nil {
			return nil, err
		}
		if r.meta != nil {
			if putMeta == nil {
				putMeta = tx.StmtContext(ctx, db.st.putBodyMeta)
			}
			if _, err := putMeta.ExecContext(ctx, ids[i], r.body, r.meta); err != nil {
				return nil, err
			}
		} else if _, err := putBody.ExecContext(ctx, ids[i], r.body); err != nil {
			return nil, err
		}
	}
	// One depth update per queue of the group (usually one queue).
	type count struct{ qid, n int64 }
	var counts []count
next:
	for _, r := range group {
		for i := range counts {
			if counts[i].qid == r.qid {
				counts[i].n++
				continue next
			}
		}
		counts = append(counts, count{r.qid, 1})
	}
	depth := tx.StmtContext(ctx, db.st.depth)
	for _, c := range counts {
		if _, err := depth.ExecContext(ctx, c.qid, c.n); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	db.committed()
	return ids, nil
}
