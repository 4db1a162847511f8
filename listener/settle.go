package listener

import (
	"context"
	"fmt"
	"sync"

	"github.com/adaptq/adaptq/queue"
)

// Settle in transaction (issue 30). A handler on a database queue may
// delete its own message inside its own transaction (postgres.DeleteTx,
// sqlite.DeleteTx), so that its writes and the delete commit or roll back
// together. The listener gives each handler's context a txSettle for its
// message (queue.WithTxSettler); the driver's delete reads the newest
// receipt through it, which moves the message out of renewal's reach:
//
//	running ──BeginSettle──▶ txSettling ──EndSettle(deleted)──▶ txSettled
//	   ▲                          │                                 │
//	   └──EndSettle(not deleted)──┘            handler returns nil: done, counted deleted
//	                                           handler returns an error: running, then failed
//
// A message settled in the handler's transaction is not deleted again, and
// counts as a success and a delete. While the transaction is open the
// database keeps others off the message (PostgreSQL's row lock, which Gets
// skip; SQLite's write lock), so it needs no renewal; if the transaction
// rolls back, the message reappears at its visibility timeout.
const (
	stTxSettling uint32 = stDone + 1 + iota // its handler's delete statement runs
	stTxSettled                             // deleted in its handler's transaction
)

// txSettle is the queue.TxSettler of message i of batch b.
type txSettle struct {
	b    *batch
	i    int
	from uint32 // the state BeginSettle took the message from
}

// settleContext gives message i's handler its TxSettler.
func (b *batch) settleContext(ctx context.Context, i int) context.Context {
	return queue.WithTxSettler(ctx, &txSettle{b: b, i: i})
}

// callSettle is the queue.TxSettler of a batch handler call: each of its
// messages' txSettle, by id, made at the first settle (most calls make
// none). A message the call held twice, which the lease check before the
// call rules out, would be the later, newer one.
type callSettle struct {
	runs []ref
	once sync.Once
	byID map[string]*txSettle
}

// callSettleContext gives a batch handler call the TxSettler of the
// messages it runs.
func callSettleContext(ctx context.Context, runs []ref) context.Context {
	return queue.WithTxSettler(ctx, &callSettle{runs: runs})
}

func (cs *callSettle) of(id string) *txSettle {
	cs.once.Do(func() {
		cs.byID = make(map[string]*txSettle, len(cs.runs))
		for _, r := range cs.runs {
			cs.byID[r.b.msgs[r.i].ID] = &txSettle{b: r.b, i: r.i}
		}
	})
	return cs.byID[id]
}

func (cs *callSettle) BeginSettle(id string) (string, error) {
	s := cs.of(id)
	if s == nil {
		return "", fmt.Errorf("%w: settle: message %s is not one this batch handler call runs", queue.ErrInvalidArgument, id)
	}
	return s.BeginSettle(id)
}

func (cs *callSettle) EndSettle(id string, deleted bool) {
	if s := cs.of(id); s != nil {
		s.EndSettle(id, deleted)
	}
}

func (s *txSettle) BeginSettle(id string) (string, error) {
	b := s.b
	if b.msgs[s.i].ID != id {
		return "", fmt.Errorf("%w: settle: message %s is not the one this handler runs (%s)", queue.ErrInvalidArgument, id, b.msgs[s.i].ID)
	}
	// b.mu orders this after any renewal pass under way, so the receipt
	// read is the newest, and renewal skips the message from now on.
	b.mu.Lock()
	defer b.mu.Unlock()
	// A message settled before in this run (a second delete, or a run
	// again after a worker fault whose transaction rolled back) is left
	// to the database to judge.
	for _, from := range []uint32{stRunning, stTxSettled} {
		if b.state[s.i].CompareAndSwap(from, stTxSettling) {
			s.from = from
			return b.receipt(s.i), nil
		}
	}
	return "", fmt.Errorf("%w: message %s: its lease was lost before the settle", queue.ErrReceiptMismatch, id)
}

func (s *txSettle) EndSettle(_ string, deleted bool) {
	if deleted {
		s.b.state[s.i].CompareAndSwap(stTxSettling, stTxSettled)
	} else {
		s.b.state[s.i].CompareAndSwap(stTxSettling, s.from)
	}
}

// settledInTx settles message i, whose handler returned err, if the
// handler deleted it in its own transaction: with err nil it is done and
// counted as deleted (true); with an error the transaction did not commit
// (or the handler says so), and the message goes back to running for the
// failure path (false).
func (b *batch) settledInTx(i int, err error) bool {
	switch b.state[i].Load() {
	case stTxSettled, stTxSettling:
	default:
		return false
	}
	if err == nil && b.state[i].CompareAndSwap(stTxSettled, stDone) {
		b.l.failures.forget(b.msgs[i].ID)
		b.l.stats.deleted.Add(1)
		return true
	}
	if !b.state[i].CompareAndSwap(stTxSettled, stRunning) {
		b.state[i].CompareAndSwap(stTxSettling, stRunning)
	}
	return false
}
