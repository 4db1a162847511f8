package listener

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/adaptq/adaptq/queue"
)

// Settle in transaction (issue 30). A handler on a database queue may
// delete its own message inside its own transaction (postgres.DeleteTx,
// sqlite.DeleteTx), so that its writes and the delete commit or roll back
// together. The listener gives each handler's context a txSettle for its
// message (queue.WithTxSettler), and a batch handler's call one for each
// of its messages (callSettle); the driver's delete reads the newest
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

// txSettle is the queue.TxSettler of message i of batch b. A batch's are
// set once, when it is made (newBatch), and keep their b and i while a
// task reuses the batch.
type txSettle struct {
	b    *batch
	i    int32
	from uint32 // the state BeginSettle took the message from
}

// runnerCtx is the context a runner's handlers run under: its handler
// context, carrying the runner's TxSettler, which settles the message
// whose handler runs or ran last (cur, set by the runner before each
// handler call). One context serves every message of a runner, so that a
// message's costs no allocation. A handler that kept its context past its
// return finds its message settled (ErrReceiptMismatch, as with a context
// of its own), no longer in the batch (its task reused it), another
// message running (BeginSettle checks the id: ErrInvalidArgument), or a
// later delivery of its message running (BeginSettle checks the delivery's
// receipt: ErrReceiptMismatch); and a settle it began while its message
// was current ends on nothing else (EndSettle checks the delivery too).
type runnerCtx struct {
	context.Context
	cur atomic.Pointer[txSettle]
}

// Value is the handler context's value for key, the runner's settler for
// SettleTx's.
func (r *runnerCtx) Value(key any) any { return queue.SettlerValue(r.Context, key, r) }

func (r *runnerCtx) BeginSettle(m *queue.Message) (string, error) {
	s := r.cur.Load()
	if s == nil {
		return "", fmt.Errorf("%w: settle: message %s: its handler has returned", queue.ErrReceiptMismatch, m.ID)
	}
	return s.BeginSettle(m)
}

func (r *runnerCtx) EndSettle(m *queue.Message, deleted bool) {
	if s := r.cur.Load(); s != nil {
		s.EndSettle(m, deleted)
	}
}

// settleContext makes ctx, the runner's, settle message i, whose handler
// is about to run.
func (b *batch) settleContext(ctx *runnerCtx, i int) context.Context {
	ctx.cur.Store(&b.settles[i])
	return ctx
}

// callSettle is the queue.TxSettler of a batch handler call: it settles
// each message of the call as txSettle does for a runner's.
type callSettle map[string]*txSettle

// callContext gives a batch handler call over runs its TxSettler.
func callContext(ctx context.Context, runs []ref) context.Context {
	s := make(callSettle, len(runs))
	for _, r := range runs {
		s[r.b.msgs[r.i].ID] = &txSettle{b: r.b, i: int32(r.i)}
	}
	return queue.WithTxSettler(ctx, s)
}

func (s callSettle) BeginSettle(m *queue.Message) (string, error) {
	t, ok := s[m.ID]
	if !ok {
		return "", fmt.Errorf("%w: settle: message %s is not one this call runs", queue.ErrInvalidArgument, m.ID)
	}
	return t.BeginSettle(m)
}

func (s callSettle) EndSettle(m *queue.Message, deleted bool) {
	if t, ok := s[m.ID]; ok {
		t.EndSettle(m, deleted)
	}
}

// holds reports whether message i of the batch is the delivery m (the
// handler's message, or a copy of it): the same id, got by the same get.
// b.mu is held.
func (s *txSettle) holds(m *queue.Message) bool {
	b := s.b
	if int(s.i) >= len(b.msgs) {
		return false
	}
	c := b.msgs[s.i]
	return c == m || c.ID == m.ID && c.PopReceipt == m.PopReceipt
}

func (s *txSettle) BeginSettle(m *queue.Message) (string, error) {
	b := s.b
	// b.mu orders this after any renewal pass under way, so the receipt
	// read is the newest, and renewal skips the message from now on; and
	// after a task's reuse of the batch, which sets b.msgs under it.
	b.mu.Lock()
	defer b.mu.Unlock()
	id := m.ID
	if int(s.i) >= len(b.msgs) {
		// The batch was completed and its task keeps it for its next.
		return "", fmt.Errorf("%w: settle: message %s: its handler has returned", queue.ErrReceiptMismatch, id)
	}
	if b.msgs[s.i].ID != id {
		return "", fmt.Errorf("%w: settle: message %s is not the one this handler runs", queue.ErrInvalidArgument, id)
	}
	if !s.holds(m) {
		// The same message, delivered again to this runner: the caller's
		// delivery (its receipt) is over.
		return "", fmt.Errorf("%w: settle: message %s: its handler has returned, and a later delivery runs", queue.ErrReceiptMismatch, id)
	}
	// A message settled before in this run (a second delete, or a run
	// again after a worker fault whose transaction rolled back) is left
	// to the database to judge.
	for _, from := range []uint32{stRunning, stTxSettled} {
		if b.state[s.i].CompareAndSwap(from, stTxSettling) {
			s.from = from
			return b.receipt(int(s.i)), nil
		}
	}
	return "", fmt.Errorf("%w: message %s: its lease was lost before the settle", queue.ErrReceiptMismatch, id)
}

func (s *txSettle) EndSettle(m *queue.Message, deleted bool) {
	// Under b.mu, which orders it after a task's reuse of the batch: a
	// settle begun by a handler that has returned ends after its runner
	// took the message back (unsettleTx), maybe while the slot holds
	// another delivery, whose settle is not this one's to end.
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if !s.holds(m) {
		return
	}
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
	if b.state[i].Load() < stTxSettling { // stTxSettling and stTxSettled are the last states
		return false // the common case, inlined: no delete in a transaction
	}
	return b.settleTx(i, err)
}

// settleTx is settledInTx for a message its handler deleted in a
// transaction.
func (b *batch) settleTx(i int, err error) bool {
	if err == nil && b.state[i].CompareAndSwap(stTxSettled, stDone) {
		b.l.failures.forget(b.msgs[i].ID)
		b.l.stats.deleted.Add(1)
		return true
	}
	b.unsettleTx(i)
	return false
}

// unsettleTx takes message i, whose handler failed after deleting it in
// its transaction, back to running: the transaction most likely rolled
// back, so renewal extends the message again (through a worker fault's
// pause too), and finds it gone if not. Its delete may have committed
// (the handler failed after its commit): poisoning checks first
// (heldAfterTx). Only its runner calls it, after the handler returned.
func (b *batch) unsettleTx(i int) {
	if b.state[i].CompareAndSwap(stTxSettled, stRunning) {
		b.txDeleted[i] = true
	} else {
		b.state[i].CompareAndSwap(stTxSettling, stRunning)
	}
}

// heldAfterTx reports whether message i, which its runner settles after
// its handler deleted it in a transaction and then failed, is still in
// the queue under this lease: the transaction rolled back. It renews the
// lease to find out (carrying the new receipt forward). A message the
// transaction deleted (ErrNotFound), or lost meanwhile, is not held; on
// any other error it is taken as held, so that it is poisoned as before
// (a duplicate at worst, never a loss).
func (b *batch) heldAfterTx(i int) bool {
	if !b.txDeleted[i] {
		return true
	}
	l := b.l
	b.mu.Lock()
	defer b.mu.Unlock()
	nr, err := l.q.UpdateVisibility(l.opCtx, b.msgs[i].ID, b.receipt(i), l.o.VisibilityTimeout)
	switch {
	case err == nil:
		b.setReceipt(i, nr)
		return true
	case errors.Is(err, queue.ErrNotFound), errors.Is(err, queue.ErrReceiptMismatch):
		return false
	}
	return true
}
