package queue

import (
	"context"
	"fmt"
)

// TxSettler is what a listener puts in a handler's context for the message
// the handler runs, so that a driver's delete inside the handler's own
// database transaction (postgres.DeleteTx, sqlite.DeleteTx) uses the
// message's newest pop receipt and the listener knows the message is
// settled: it then neither deletes it again nor renews it, and counts it as
// a success if the handler returns nil.
//
// A driver calls it through SettleTx; handlers never call it themselves.
type TxSettler interface {
	// BeginSettle stops the renewal of m, the delivery the caller's handler
	// runs, and returns its newest pop receipt, or an error wrapping
	// ErrReceiptMismatch if its lease was lost (another consumer may hold
	// it now) or m is not a delivery it settles now (the context of a
	// handler that has returned: a later delivery of the same message is
	// not its to settle), or ErrNotFound if it was settled already.
	BeginSettle(m *Message) (receipt string, err error)
	// EndSettle reports whether the delete deleted m in the transaction;
	// if not, the message is held (and renewed) as before. It does
	// nothing if m is no longer the delivery the settler settles.
	EndSettle(m *Message, deleted bool)
}

type txSettlerKey struct{}

// WithTxSettler returns ctx carrying s (the listener's doing).
func WithTxSettler(ctx context.Context, s TxSettler) context.Context {
	return context.WithValue(ctx, txSettlerKey{}, s)
}

// SettlerValue is the Value method of a context that carries s itself, as
// WithTxSettler's does, for a caller that keeps such a context per message
// in a structure of its own and so saves WithTxSettler's allocation (the
// listener's batches): it is s for the key SettleTx looks up, else
// parent.Value(key).
func SettlerValue(parent context.Context, key any, s TxSettler) any {
	if _, ok := key.(txSettlerKey); ok {
		return s
	}
	return parent.Value(key)
}

// SettleTx runs del, a delete of m inside the caller's transaction, with
// m's newest receipt: the one the TxSettler in ctx gives, else
// m.PopReceipt (a handler run outside a listener). A driver's DeleteTx is
// SettleTx around its statement; del returns nil once the message is
// deleted in the transaction, or ErrReceiptMismatch / ErrNotFound.
func SettleTx(ctx context.Context, m *Message, del func(receipt string) error) error {
	if m == nil {
		return fmt.Errorf("%w: settle: nil message", ErrInvalidArgument)
	}
	s, _ := ctx.Value(txSettlerKey{}).(TxSettler)
	if s == nil {
		return del(m.PopReceipt)
	}
	r, err := s.BeginSettle(m)
	if err != nil {
		return err
	}
	err = del(r)
	s.EndSettle(m, err == nil)
	return err
}
